"""schemathesis against our own OpenAPI document: no 5xx, every 4xx in the error envelope."""

from __future__ import annotations

import json

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings

from service.api.openapi import document
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body

OPERATIONS = [(method, path) for path, ops in document()["paths"].items() for method in ops]


@pytest.mark.parametrize(
    ("method", "path"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS]
)
def test_generated_requests_get_clean_replies(
    app: Flask, auth: Auth, method: str, path: str
) -> None:
    client = app.test_client()
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    schema = schemathesis.openapi.from_dict(document())
    schema.app = app
    operation = schema[path][method]
    headers = auth.headers()

    @given(case=operation.as_strategy())
    @settings(
        max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case) -> None:  # type: ignore[no-untyped-def]
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, response.text[:300])
        if response.status_code >= 400:
            error = json.loads(response.text)["error"]
            assert {"code", "message", "details"} <= set(error)

    check()
