"""Hardening: the OpenAPI document, roles on every route, hostile input, request logs."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.api.openapi import document
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body
from tests.integration.test_stream import minutes_ago, reading

#: Who may call what: the contract of DESIGN.md §3, written out so a change must be deliberate.
ROLE_TABLE: dict[tuple[str, str], set[str]] = {
    ("POST", "/v1/contracts"): {"admin"},
    ("POST", "/v1/contracts/fit"): {"admin"},
    ("GET", "/v1/contracts"): {"reader", "admin"},
    ("GET", "/v1/contracts/{contract_id}"): {"reader", "admin"},
    ("GET", "/v1/contracts/{contract_id}/verify"): {"reader", "admin"},
    ("POST", "/v1/contracts/{contract_id}/retire"): {"admin"},
    ("GET", "/v1/models/{model}/contract"): {"reader", "admin"},
    ("POST", "/v1/predictions"): {"ingest", "admin"},
    ("POST", "/v1/labels"): {"ingest", "admin"},
    ("GET", "/v1/models/{model}/calibration"): {"reader", "admin"},
    ("GET", "/v1/models/{model}/cohorts"): {"reader", "admin"},
    ("POST", "/v1/gate"): {"admin"},
    ("GET", "/v1/gate/decisions"): {"reader", "admin"},
    ("GET", "/v1/audit/events"): {"reader", "admin"},
    ("GET", "/v1/audit/verify"): {"reader", "admin"},
    ("GET", "/v1/openapi.json"): {"reader", "admin"},
    ("GET", "/v1/models/{model}/reliability.svg"): {"reader", "admin"},
    ("GET", "/v1/contracts/{contract_id}/reliability.svg"): {"reader", "admin"},
}


def app_routes(app: Flask) -> set[tuple[str, str]]:
    out = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            out.add((method, path))
    return out


def test_the_openapi_document_describes_every_route(
    app: Flask, client: FlaskClient, auth: Auth
) -> None:
    served = client.get("/v1/openapi.json", headers=auth.headers("reader")).get_json()
    assert served == json.loads(json.dumps(document()))
    documented = {(m.upper(), p) for p, ops in served["paths"].items() for m in ops}
    api = {route for route in app_routes(app) if not route[1].startswith("/ui")}
    assert documented == api
    refs = re.findall(r'"#/components/schemas/(\w+)"', json.dumps(served))
    assert set(refs) <= set(served["components"]["schemas"])
    for path, ops in served["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (method, path)
            if op.get("security") != []:
                assert {"401", "403"} <= set(op["responses"]), (method, path)


def test_every_v1_route_enforces_its_roles(app: Flask, client: FlaskClient, auth: Auth) -> None:
    v1 = {route for route in app_routes(app) if route[1].startswith("/v1/")}
    assert v1 == set(ROLE_TABLE)
    for (method, path), allowed in ROLE_TABLE.items():
        url = path.replace("{contract_id}", "nope").replace("{model}", "nobody")
        for role in ("reader", "ingest", "admin"):
            response = client.open(
                url,
                method=method,
                json={} if method == "POST" else None,
                headers=auth.headers(role),
            )
            if role in allowed:
                assert response.status_code != 403, (method, path, role)
            else:
                assert response.status_code == 403, (method, path, role, response.status_code)
                assert response.get_json()["error"]["code"] == "forbidden"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
prediction_items = st.fixed_dictionaries(
    {
        "id": st.one_of(st.text(max_size=10), st.integers()),
        "ts": st.one_of(st.just("2026-11-30T10:00:00Z"), st.text(max_size=25)),
        "logits": st.one_of(
            st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4), json_values
        ),
    },
    optional={
        "cohort": st.one_of(
            st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3), json_values
        ),
        "extra": json_values,
    },
)


def assert_clean(response) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code < 500, response.get_data(as_text=True)
    if response.status_code >= 400:
        error = response.get_json()["error"]
        assert isinstance(error["code"], str) and isinstance(error["message"], str)
        assert isinstance(error["details"], list)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "model": st.sampled_from(["glyphs", "nobody", ""]),
                "predictions": st.lists(prediction_items, max_size=4),
            }
        ),
    )
)
def test_fuzzed_prediction_batches_never_fail_the_server(
    client: FlaskClient, auth: Auth, body: Any
) -> None:
    if client.get("/v1/models/glyphs/contract", headers=auth.headers()).status_code == 404:
        client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    assert_clean(client.post("/v1/predictions", json=body, headers=auth.headers("ingest")))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "model": st.just("glyphs"),
                "labels": st.lists(
                    st.fixed_dictionaries(
                        {"id": json_values, "label": json_values, "ts": json_values}
                    ),
                    max_size=4,
                ),
            }
        ),
    ),
    route=st.sampled_from(["/v1/labels", "/v1/contracts", "/v1/contracts/fit", "/v1/gate"]),
)
def test_fuzzed_bodies_on_other_routes_get_clean_errors(
    client: FlaskClient, auth: Auth, body: Any, route: str
) -> None:
    if client.get("/v1/models/glyphs/contract", headers=auth.headers()).status_code == 404:
        client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    assert_clean(client.post(route, json=body, headers=auth.headers()))


@pytest.mark.parametrize(
    "query",
    [
        "window=%00",
        "cohort=%ff",
        "start=2026-13-45T00:00:00Z&end=2026-01-01T00:00:00Z",
        "window=99999999d",
        "cohort=region:" + "x" * 500,
        "cohort=region:'; DROP TABLE labels;--",
    ],
)
def test_hostile_query_strings(client: FlaskClient, auth: Auth, query: str) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    assert_clean(client.get(f"/v1/models/glyphs/calibration?{query}", headers=auth.headers()))


def test_hostile_but_valid_values_are_stored_as_data(client: FlaskClient, auth: Auth) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    sneaky = "'; DROP TABLE predictions; --"
    preds = [
        {
            "id": "q'1",
            "ts": minutes_ago(1),
            "cohort": {"region": sneaky},
            "logits": [1e300, -1e300, 0.0],
        },
        {
            "id": "ü-ñ-∂",
            "ts": minutes_ago(1),
            "cohort": {"region": "emea"},
            "logits": [1.0, 2.0, 3.0],
        },
    ]
    response = client.post(
        "/v1/predictions",
        json={"model": "glyphs", "predictions": preds},
        headers=auth.headers("ingest"),
    )
    assert response.status_code == 200 and response.get_json()["accepted"] == 2
    got = reading(client, auth, "glyphs", f"cohort=region:{sneaky}")
    assert got["n_predictions"] == 1
    nul = client.post(
        "/v1/predictions",
        json={"model": "glyphs", "predictions": [{**preds[1], "id": "a\x00b"}]},
        headers=auth.headers("ingest"),
    )
    assert nul.status_code == 422
    assert nul.get_json()["error"]["details"][0]["field"] == "predictions[0].id"


def test_a_100000_item_batch(client: FlaskClient, auth: Auth) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    ts = minutes_ago(2)
    preds = [{"id": f"b{i}", "ts": ts, "logits": [i % 3, 0.5, 0.25]} for i in range(100_000)]
    response = client.post(
        "/v1/predictions",
        json={"model": "glyphs", "predictions": preds},
        headers=auth.headers("ingest"),
    )
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["accepted"] == 100_000
    too_many = client.post(
        "/v1/predictions",
        json={"model": "glyphs", "predictions": preds + preds[:1]},
        headers=auth.headers("ingest"),
    )
    assert too_many.status_code == 422
    assert too_many.get_json()["error"]["details"][0]["field"] == "predictions"


def test_requests_are_logged_with_ids_and_never_with_tokens(
    client: FlaskClient, auth: Auth
) -> None:
    records: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Capture()
    logger = logging.getLogger("service")
    logger.addHandler(handler)
    try:
        token = auth.token("reader")
        response = client.get(
            "/v1/contracts", headers={**auth.headers("reader"), "X-Request-ID": "trace-42"}
        )
        assert response.headers["X-Request-ID"] == "trace-42"
        generated = client.get("/healthz").headers["X-Request-ID"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)
        client.get("/v1/contracts", headers={"Authorization": "Bearer calmon_wrong-secret"})
    finally:
        logger.removeHandler(handler)
    lines = [handler.format(r) + json.dumps(r.__dict__, default=str) for r in records]
    entry = next(r for r in records if getattr(r, "request_id", None) == "trace-42")
    assert (entry.method, entry.route, entry.status, entry.principal) == (  # type: ignore[attr-defined]
        "GET",
        "/v1/contracts",
        200,
        "test-reader",
    )
    for line in lines:
        assert token not in line and ADMIN_TOKEN not in line
        assert "calmon_wrong-secret" not in line
