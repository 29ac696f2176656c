"""Hostile input: fuzzed batches and bodies, hostile query strings and values, extreme contracts,
the largest batch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.web.queries import encode_cursor
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body, registration_body
from tests.integration.test_stream import minutes_ago, reading

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
            "logits": [1e6, -1e6, 0.0],
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
    labels = [{"id": p["id"], "label": 1, "ts": minutes_ago(0)} for p in preds]
    client.post("/v1/labels", json={"model": "glyphs", "labels": labels}, headers=auth.headers())
    got = reading(client, auth, "glyphs", f"cohort=region:{sneaky}")
    assert got["n_predictions"] == 1
    assert got["metrics"]["nll"] > 1e6
    nul = client.post(
        "/v1/predictions",
        json={"model": "glyphs", "predictions": [{**preds[1], "id": "a\x00b"}]},
        headers=auth.headers("ingest"),
    )
    assert nul.status_code == 422
    assert nul.get_json()["error"]["details"][0]["field"] == "predictions[0].id"


def _raw_post(client: FlaskClient, auth: Auth, url: str, raw: str) -> Any:
    headers = {**auth.headers(), "Content-Type": "application/json"}
    return client.post(url, data=raw, headers=headers)


def _prediction(**fields: Any) -> str:
    """A batch of a valid prediction and one with ``fields`` (as JSON text)."""
    valid = {"id": "p0", "ts": minutes_ago(1), "logits": [1, 2, 3]}
    return json.dumps({"model": "glyphs", "predictions": [valid, {**valid, "id": "p1", **fields}]})


#: The 500s found against a served calmon, each now a 422 naming the item and field.
REPORTED_BODIES = [
    (_prediction(cohort={"k": {"n": 1}}), "predictions[1].cohort.k"),
    (_prediction(cohort={"k": ["a"]}), "predictions[1].cohort.k"),
    (_prediction(logits=[1e308, -1e308, 0]), "predictions[1].logits"),
    (
        _prediction(logits="BIG").replace('"BIG"', "[1" + "0" * 400 + ", 0, 0]"),
        "predictions[1].logits",
    ),
    (_prediction(ts="0001-01-01T00:00:00Z"), "predictions[1].ts"),
    (_prediction(ts="9999-12-31T23:59:59Z"), "predictions[1].ts"),
    (_prediction(ts="1999-12-31T23:59:59Z"), "predictions[1].ts"),
    (_prediction(id="SURROGATE").replace("SURROGATE", "\\ud800"), "predictions[1].id"),
    (
        _prediction(cohort={"k": "SURROGATE"}).replace("SURROGATE", "\\ud800"),
        "predictions[1].cohort.k",
    ),
    (_prediction(cohort={"k\n": "v"}), "predictions[1].cohort.k\\n"),
]


@pytest.mark.parametrize(("raw", "field"), REPORTED_BODIES)
def test_reported_500s_are_422_naming_item_and_field(
    client: FlaskClient, auth: Auth, raw: str, field: str
) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    response = _raw_post(client, auth, "/v1/predictions", raw)
    assert response.status_code == 422, response.get_json()
    details = response.get_json()["error"]["details"]
    assert [(d["field"], d.get("item")) for d in details] == [(field, 1)]
    assert reading(client, auth, "glyphs")["n_predictions"] == 0


def test_labels_refuse_timestamps_outside_the_range(client: FlaskClient, auth: Auth) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat().replace("+00:00", "Z")
    labels = [
        {"id": "a", "label": 0, "ts": minutes_ago(0)},
        {"id": "b", "label": 0, "ts": "0001-01-01T00:00:00Z"},
        {"id": "c", "label": 0, "ts": later},
    ]
    response = client.post(
        "/v1/labels", json={"model": "glyphs", "labels": labels}, headers=auth.headers()
    )
    assert response.status_code == 422
    details = response.get_json()["error"]["details"]
    assert [(d["field"], d["item"]) for d in details] == [("labels[1].ts", 1), ("labels[2].ts", 2)]


@pytest.mark.parametrize(
    ("url", "status", "field"),
    [
        ("/v1/contracts?limit=%C2%B2", 422, "limit"),
        ("/v1/contracts?limit=%D9%A3", 422, "limit"),
        ("/v1/contracts?cursor=" + encode_cursor(10**23), 422, "cursor"),
        ("/v1/audit/events?cursor=" + encode_cursor(10**23), 422, "cursor"),
        ("/v1/gate/decisions?cursor=" + encode_cursor(10**23), 422, "cursor"),
        (
            "/v1/models/glyphs/calibration?start=9999-12-31T00:00:00Z&end=9999-12-31T23:59:59Z",
            422,
            "start",
        ),
        ("/v1/models/glyphs/calibration?window=24h%0A", 422, "window"),
        ("/v1/models/glyphs/calibration?cohort=region%0A:emea", 422, "cohort"),
        ("/v1/models/a%00b/calibration", 404, "model"),
        ("/v1/contracts/%00", 404, "contract_id"),
        ("/v1/contracts/%00/reliability.svg", 404, "contract_id"),
        ("/v1/audit/events?model=a%00b", 422, "model"),
        ("/v1/gate/decisions?contract_id=a%00b", 422, "contract_id"),
        ("/v1/contracts?model=glyphs%0A", 422, "model"),
        ("/v1/models/glyphs/contract?at=0001-01-01T00:00:00Z", 422, "at"),
    ],
)
def test_reported_query_and_path_500s_are_4xx_naming_the_parameter(
    client: FlaskClient, auth: Auth, url: str, status: int, field: str
) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    response = client.get(url, headers=auth.headers())
    assert response.status_code == status, response.get_json()
    assert field in {d["field"] for d in response.get_json()["error"]["details"]}


def test_nan_tokens_are_400_naming_their_fields(client: FlaskClient, auth: Auth) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    raw = _prediction(logits="A", score="B").replace('"A"', "[NaN, 1, 2]")
    raw = raw.replace('"B"', "-Infinity")
    response = _raw_post(client, auth, "/v1/predictions", raw)
    assert response.status_code == 400
    details = response.get_json()["error"]["details"]
    assert {(d["field"], d.get("item")) for d in details} == {
        ("predictions[1].logits[0]", 1),
        ("predictions[1].score", 1),
    }


def test_registered_extreme_contracts_cannot_make_a_bucket_infinite(
    client: FlaskClient, auth: Auth
) -> None:
    """The largest logits at the smallest temperature keep every stored sum finite."""
    fitted = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers()).get_json()
    body = registration_body(fitted, model="sharp")
    body["calibrator"] = {"method": "temperature", "temperature": 0.05}
    assert client.post("/v1/contracts", json=body, headers=auth.headers()).status_code == 201
    rows = [
        {"id": f"x{i}", "ts": minutes_ago(1), "logits": [1e6, -1e6, -1e6 + i]} for i in range(50)
    ]
    client.post(
        "/v1/predictions", json={"model": "sharp", "predictions": rows}, headers=auth.headers()
    )
    labels = [{"id": r["id"], "label": 1, "ts": minutes_ago(0)} for r in rows]
    joined = client.post(
        "/v1/labels", json={"model": "sharp", "labels": labels}, headers=auth.headers()
    )
    assert joined.get_json()["joined"] == 50
    got = reading(client, auth, "sharp")
    assert 3.9e7 < got["metrics"]["nll"] < 4.1e7
    assert got["drift"]["refit_temperature"] is not None


@pytest.mark.slow
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
