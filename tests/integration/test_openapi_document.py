"""The served OpenAPI document: every route, and every route enforcing the roles it documents."""

from __future__ import annotations

import json
import re

from flask import Flask
from flask.testing import FlaskClient

from service.web.openapi import document
from tests.integration.conftest import Auth

#: Who may call what (the roles of docs/api.md), written out so a change must be deliberate.
ROLE_TABLE: dict[tuple[str, str], set[str]] = {
    ("POST", "/v1/contracts"): {"admin"},
    ("POST", "/v1/contracts/fit"): {"admin"},
    ("GET", "/v1/contracts"): {"reader", "gate", "admin"},
    ("GET", "/v1/contracts/{contract_id}"): {"reader", "gate", "admin"},
    ("GET", "/v1/contracts/{contract_id}/verify"): {"reader", "gate", "admin"},
    ("POST", "/v1/contracts/{contract_id}/retire"): {"admin"},
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
    ("GET", "/v1/openapi.json"): {"reader", "gate", "admin"},
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
