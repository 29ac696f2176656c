"""schemathesis against the served OpenAPI document: no 5xx, every status and content type
documented, every reply matching its schema, every 4xx in the error envelope, and every
schema-valid request accepted (``positive_data_acceptance``) unless the refusal is one of the
operation's ``ALLOWANCES``: a rule the document cannot state, with the reason.

Per operation, ``EXAMPLES`` generated requests (schema-conforming and schema-violating ones,
some aimed at a stored contract and model), then a stateful phase that follows the document's
links from a stored contract to the operations taking its id or model. Generation is
derandomized: every run draws the same requests, so a failure in CI repeats locally.
"""

from __future__ import annotations

import json
import os
import re
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
    positive_data_acceptance,
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

#: Why a refusal passes: rules between fields, or on stored state or the clock, that JSON Schema
#: does not state.
CLOCK = (
    "a time from 2000-01-01 to 1 day after the request's receipt: the range moves with the "
    "clock, which a schema cannot state"
)
ORDER = "an end not before its start: an order between two fields"
CURSOR = "a cursor this endpoint returned: only the server knows the cursors it issued"
NUL = "text holds no NUL character: a rule on every string, stated once in docs/api.md"
BLANK = "text that is not only whitespace, stated once in docs/api.md"
COUNT = "a count written as a number with a fraction part (1.0) is refused: counts are integers"
TOGETHER = "both or neither: OpenAPI states no query parameters required together"
ARROW_QUERY = (
    "model and contract_id in the query belong to an Arrow body; OpenAPI ties no parameter "
    "to the body's media type"
)
BY_CLASSES = (
    "shapes that follow the contract's task and classes (a label among the classes, logits "
    "one per class, a method or calibrator of the task): rules between fields"
)
READINGS = (
    "a baseline reading consistent with itself and its task (binary fields in binary readings "
    "only, counts adding up to n, the chosen method among the candidates)"
)
EDGES = "bin edges from exactly 0 to exactly 1: a rule on a list's first and last element"
STEP = "a whole number of 5-minute periods within the retention: arithmetic on a duration"
LEAKAGE = "fit and eval sets that differ: a rule between two fields' whole contents"

EITHER = "window, or start with end: OpenAPI states no query parameters excluding each other"
PAIR = "c_fp and c_fn both or neither: a rule between two fields"
WINDOW = {"start|end": CLOCK + "; " + ORDER, "window": EITHER}

#: Allowances of every operation.
EVERYWHERE = {"message:NUL character": NUL}
#: Per operation, the refusals of schema-valid requests that pass, by what the error names:
#: a detail's field (a batch index written ``[]``) matched whole, ``message:`` words in a
#: detail's message, or ``code:`` the code of a reply without details; each with its reason.
ALLOWANCES: dict[str, dict[str, str]] = {
    "GET /v1/audit/events": {"since|until": CLOCK, "cursor": CURSOR},
    "GET /v1/audit/verify": {"expected_seq|expected_sha256": TOGETHER},
    "GET /v1/contracts": {"active_at": CLOCK, "cursor": CURSOR},
    "GET /v1/gate/decisions": {"cursor": CURSOR},
    "GET /v1/models": {"cursor": CURSOR},
    "GET /v1/models/{model}/calibration": WINDOW,
    "GET /v1/models/{model}/contract": {"at": CLOCK},
    "GET /v1/models/{model}/history": {**WINDOW, "step": STEP},
    "GET /v1/models/{model}/history.svg": {**WINDOW, "step": STEP},
    "GET /v1/models/{model}/reliability.svg": WINDOW,
    "POST /v1/contracts": {
        "baseline\\..*": READINGS,
        "data_window\\.(start|end)": CLOCK + "; " + ORDER,
        "classes|classes\\[\\]|calibrator\\..*": BY_CLASSES + "; " + BLANK,
        "bin_edges": EDGES,
        "bin_edges\\..*": COUNT,
        "checkpoint|model|outcome|population|split\\..*": BLANK,
        "policy\\.(c_fp|c_fn)": PAIR,
        "policy\\..*": COUNT,
    },
    "POST /v1/contracts/fit": {
        "code:leakage": LEAKAGE,
        "data_window\\.(start|end)": CLOCK + "; " + ORDER,
        "classes|method|(fit|eval)\\.(labels|logits|scores)(\\[\\])?": BY_CLASSES,
        "bin_edges": EDGES,
        "bin_edges\\..*": COUNT,
        "checkpoint|model|outcome|population|split\\..*": BLANK,
        "policy\\.(c_fp|c_fn)": PAIR,
        "policy\\..*": COUNT,
    },
    "POST /v1/contracts/{contract_id}/retire": {"reason": BLANK},
    "POST /v1/gate": {"evaluation\\..*": BY_CLASSES, "policy\\..*": COUNT},
    "POST /v1/labels": {
        "model|contract_id": ARROW_QUERY,
        "labels\\[\\]\\.ts": CLOCK,
        "labels\\[\\]\\.label": BY_CLASSES,
    },
    "POST /v1/predictions": {
        "model|contract_id": ARROW_QUERY,
        "predictions\\[\\]\\.ts": CLOCK,
        "predictions\\[\\]\\.(logits|score)": BY_CLASSES,
    },
}


def allowed_refusal(operation: str, response: Any) -> bool:
    """Whether a refusal of a schema-valid request is one the operation's allowances name:
    every detail matches one by its field (``[n]`` written ``[]``), matched whole, or by
    ``message:`` words in its message; a reply without details by ``code:`` its error code."""
    allowances = {**EVERYWHERE, **ALLOWANCES.get(operation, {})}
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    if not error["details"]:
        return f"code:{error['code']}" in allowances
    return all(_allowed(detail, allowances) for detail in error["details"])


def _allowed(detail: dict[str, Any], allowances: dict[str, str]) -> bool:
    field = re.sub(r"\[\d+\]", "[]", detail["field"])
    for key in allowances:
        kind, _, words = key.partition(":")
        if words and kind == "message" and words in detail["message"]:
            return True
        if not words and re.fullmatch(key, field, re.DOTALL):
            return True
    return False


def positive_data_acceptance_but_allowances(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' ``positive_data_acceptance``, but for the ``ALLOWANCES``."""
    if response.status_code >= 400 and allowed_refusal(case.operation.label, response):
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS.append(positive_data_acceptance_but_allowances)
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
        derandomize=True,
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
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
