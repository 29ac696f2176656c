"""The served OpenAPI document: every route, and every route enforcing the roles it documents."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from flask import Flask
from flask.testing import FlaskClient

from service.web.routes import api_document
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body

#: Who may call what (the roles of docs/api.md), written out so a change must be deliberate.
ROLE_TABLE: dict[tuple[str, str], set[str]] = {
    ("POST", "/v1/contracts"): {"admin"},
    ("POST", "/v1/contracts/fit"): {"admin"},
    ("GET", "/v1/contracts"): {"reader", "gate", "admin"},
    ("GET", "/v1/contracts/{contract_id}"): {"reader", "gate", "admin"},
    ("GET", "/v1/contracts/{contract_id}/verify"): {"reader", "gate", "admin"},
    ("POST", "/v1/contracts/{contract_id}/retire"): {"admin"},
    ("GET", "/v1/models"): {"reader", "gate", "admin"},
    ("GET", "/v1/models/{model}/contract"): {"reader", "gate", "admin"},
    ("POST", "/v1/predictions"): {"ingest", "admin"},
    ("POST", "/v1/labels"): {"ingest", "admin"},
    ("GET", "/v1/models/{model}/calibration"): {"reader", "gate", "admin"},
    ("GET", "/v1/models/{model}/history"): {"reader", "gate", "admin"},
    ("GET", "/v1/models/{model}/cohorts"): {"reader", "gate", "admin"},
    ("POST", "/v1/gate"): {"gate", "admin"},
    ("GET", "/v1/gate/decisions"): {"reader", "gate", "admin"},
    ("GET", "/v1/audit/events"): {"reader", "gate", "admin"},
    ("GET", "/v1/audit/verify"): {"reader", "gate", "admin"},
    ("GET", "/v1/openapi.json"): {"reader", "ingest", "gate", "admin"},
    ("GET", "/v1/models/{model}/reliability.svg"): {"reader", "gate", "admin"},
    ("GET", "/v1/models/{model}/history.svg"): {"reader", "gate", "admin"},
    ("GET", "/v1/contracts/{contract_id}/reliability.svg"): {"reader", "gate", "admin"},
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
    assert served == json.loads(json.dumps(api_document()))
    documented = {(m.upper(), p) for p, ops in served["paths"].items() for m in ops}
    # The review pages and the root (a redirect to them) are not part of the API.
    api = {r for r in app_routes(app) if not r[1].startswith("/ui") and r[1] != "/"}
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
        for role in ("reader", "ingest", "gate", "admin"):
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


def _valid(schema: dict[str, Any], instance: Any) -> bool:
    """Whether ``instance`` satisfies ``schema`` of the served document (refs resolved in it)."""
    root = {**api_document(), **schema}
    return jsonschema.Draft202012Validator(root).is_valid(instance)


def _body(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _query(path: str, name: str) -> dict[str, Any]:
    (param,) = [p for p in api_document()["paths"][path]["get"]["parameters"] if p["name"] == name]
    return dict(param["schema"])


def test_the_document_refuses_what_validation_refuses(client: FlaskClient, auth: Auth) -> None:
    """Each pair: an instance the schema refuses and the request validation refuses alike."""
    ok_fit = fit_body("glyphs")
    assert _valid(_body("ContractFit"), ok_fit)
    contract = client.post("/v1/contracts/fit", json=ok_fit, headers=auth.headers()).get_json()
    ts = "2026-11-30T10:00:00Z"
    refused: list[tuple[dict[str, Any], Any, str, str, Any]] = [
        # (schema, instance, method, url, body)
        (
            _query("/v1/contracts", "cursor"),
            "",
            "GET",
            "/v1/contracts?cursor=",
            None,
        ),
        (
            _query("/v1/models/{model}/calibration", "cohort"),
            "",
            "GET",
            "/v1/models/glyphs/calibration?cohort=",
            None,
        ),
        (
            _query("/v1/models/{model}/calibration", "start"),
            "1999-12-31T23:59:59Z",
            "GET",
            "/v1/models/glyphs/calibration?start=1999-12-31T23:59:59Z",
            None,
        ),
        *[
            (
                _body("PredictionBatch"),
                body,
                "POST",
                "/v1/predictions",
                body,
            )
            for body in (
                {"model": "glyphs", "predictions": [{"id": "a", "ts": ts}]},
                {
                    "model": "glyphs",
                    "predictions": [{"id": "a", "ts": "1999-12-31T23:59:59Z", "logits": [1, 2, 3]}],
                },
            )
        ],
        (
            _body("Retirement"),
            {"reason": "a\u0000b"},
            "POST",
            f"/v1/contracts/{contract['id']}/retire",
            {"reason": "a\u0000b"},
        ),
        *[
            (_body("ContractFit"), body, "POST", "/v1/contracts/fit", body)
            for body in (
                fit_body("glyphs", bin_edges=[0.1, 0.5, 1]),
                fit_body("glyphs", fit={"labels": [0, 1]}),
                fit_body("glyphs", task="binary", classes=["no", "yes"]),
            )
        ],
    ]
    for schema, instance, method, url, body in refused:
        assert not _valid(schema, instance), (url, instance)
        response = client.open(url, method=method, json=body, headers=auth.headers())
        assert response.status_code == 422, (url, response.get_json())
    leap = {"id": "a", "ts": "2016-12-31T23:59:60Z", "logits": [1, 2, 3]}
    assert _valid(_body("PredictionBatch"), {"model": "glyphs", "predictions": [leap]})
    assert _valid(_body("Retirement"), {"reason": "superseded \u00e9"})


def test_options_allows_only_the_methods_of_the_path(client: FlaskClient) -> None:
    allowed = {
        "/v1/contracts/fit": {"POST", "OPTIONS"},
        "/v1/contracts/some-id": {"GET", "HEAD", "OPTIONS"},
        "/v1/contracts/fit/verify": {"GET", "HEAD", "OPTIONS"},
    }
    for path, methods in allowed.items():
        response = client.options(path)
        assert set(response.headers["Allow"].split(", ")) == methods, path


def test_options_allows_the_documented_methods_of_every_path(client: FlaskClient) -> None:
    for template, operations in api_document()["paths"].items():
        path = template.replace("{contract_id}", "some-id").replace("{model}", "glyphs")
        documented = {method.upper() for method in operations} | {"OPTIONS"}
        if "GET" in documented:
            documented.add("HEAD")
        allow = set(client.options(path).headers["Allow"].split(", "))
        assert allow == documented, template


def test_a_path_parameter_states_what_its_route_takes(client: FlaskClient, auth: Auth) -> None:
    """``GET /v1/contracts/fit`` is no contract's path (405: ``fit`` is POST's own), and the
    document says so: the contract id's pattern refuses ``fit`` and takes any other segment."""
    contract = api_document()["paths"]["/v1/contracts/{contract_id}"]["get"]
    (parameter,) = [p for p in contract["parameters"] if p["name"] == "contract_id"]
    pattern = re.compile(parameter["schema"]["pattern"])
    assert client.get("/v1/contracts/fit", headers=auth.headers()).status_code == 405
    assert not pattern.search("fit")
    assert pattern.search("fitted") and pattern.search("some-id")


def test_the_document_is_served_without_a_token(client: FlaskClient) -> None:
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    assert response.get_json() == json.loads(json.dumps(api_document()))
    assert response.get_json()["paths"]["/v1/openapi.json"]["get"]["security"] == []
