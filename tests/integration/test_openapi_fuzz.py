"""schemathesis against the served OpenAPI document: no 5xx, every status and content type
documented, every reply matching its schema, every 4xx in the error envelope.

Per operation, ``EXAMPLES`` generated requests (schema-conforming and schema-violating ones,
some aimed at a stored contract and model), then a stateful phase that follows the document's
links from a stored contract to the operations taking its id or model.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.web.routes import api_document
from tests.integration.conftest import Auth, wipe
from tests.integration.factories import fit_body

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("CALMON_FUZZ_EXAMPLES", "100"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    allow_header_conformance,
]
OPERATIONS = [(method, path) for path, ops in api_document()["paths"].items() for method in ops]


def assert_envelope(response: Any) -> None:
    """A 4xx reply is the error envelope, whatever its content type would otherwise be."""
    if response.status_code >= 400:
        error = json.loads(response.text)["error"]
        assert {"code", "message", "details"} <= set(error), response.text[:300]


def served_schema(app: Flask, auth: Auth) -> Any:
    schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", app, headers=auth.headers())
    assert schema.raw_schema == json.loads(json.dumps(api_document()))
    return schema


@pytest.fixture
def stored(app: Flask, auth: Auth) -> dict[str, Any]:
    """A fitted contract (model ``glyphs``) with a labeled prediction, so generated requests
    aimed at it reach readings, diagrams and the gate."""
    client = app.test_client()
    contract = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers()).get_json()
    return {"contract_id": contract["id"], "model": contract["model"]}


@pytest.mark.parametrize(
    ("method", "path"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS]
)
def test_generated_requests_get_documented_replies(
    app: Flask, auth: Auth, stored: dict[str, Any], method: str, path: str
) -> None:
    operation = served_schema(app, auth)[path][method]
    known = {
        p["name"]: stored[p["name"]]
        for p in operation.definition.raw.get("parameters", [])
        if p["in"] == "path"
    }
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if known:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=known))
    headers = auth.headers()

    @given(case=st.one_of(strategies))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)
        assert_envelope(response)

    check()


def test_stateful_sequences_follow_the_links(app: Flask, auth: Auth) -> None:
    schema = served_schema(app, auth)
    headers = auth.headers()
    database = app.extensions["calmon.database"]

    class Calmon(schema.as_state_machine()):  # type: ignore[misc]
        """Every other fit is a valid one, so the links from a stored contract get followed.

        Each sequence starts from an empty database: a replayed sequence then gets the same
        responses, and so the same links to follow, as when it was first drawn.
        """

        def setup(self) -> None:
            self.fits = 0

        def teardown(self) -> None:
            wipe(database)

        def before_call(self, case: Any) -> None:
            if case.operation.label == "POST /v1/contracts/fit":
                self.fits += 1
                if self.fits % 2:
                    case.body = fit_body(model=f"stateful{self.fits}")

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=headers)
            assert_envelope(response)

    Calmon.run(
        settings=settings(
            max_examples=EXAMPLES // 2,
            stateful_step_count=8,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
