"""The OpenAPI 3.1 description of calmon's HTTP API, served at ``GET /v1/openapi.json``.

Every operation lists each status and content type it can answer with (JSON, the audit log's
CSV, the reliability diagrams' SVG, the Prometheus text format). The request schemas are those of
the declarations the service validates with (``REQUEST_BODIES``, ``service.common.fields``); the
reply schemas are written here. Links from the
contract-creating operations to the ones that take a contract id or model name let schemathesis
chain calls in its stateful phase.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from service.audit.records import LISTED_PROBLEMS
from service.auth.tokens import Permission
from service.common.fields import Text, Timestamp
from service.common.values import MAX_JSON_INTEGER, NAME_PATTERN
from service.contracts.requests import DRIFT_POLICY, FIT, REGISTRATION, RETIREMENT
from service.gate.requests import GATE_POLICY, GATE_REQUEST
from service.stream.batches import LABELS, PREDICTIONS
from service.web.auth import requires
from service.web.queries import MAX_LIMIT, MAX_SEQ

#: Every request body, each declared once beside the code that validates it.
REQUEST_BODIES = (REGISTRATION, FIT, RETIREMENT, PREDICTIONS, LABELS, GATE_REQUEST)

bp = Blueprint("openapi", __name__, url_prefix="/v1")

JSON = "application/json"
_NUMBER = {"type": "number"}
_NULLABLE_NUMBER = {"type": ["number", "null"]}
_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_JSON_INTEGER}
_TIMESTAMP = Timestamp().schema()
#: A query value that must not be empty.
_NON_EMPTY = {"type": "string", "minLength": 1}
_NAME = Text(pattern=NAME_PATTERN).schema()
_CI = {"type": "array", "minItems": 2, "maxItems": 2, "items": _FRACTION}
_NULLABLE_PAIR = {"type": ["array", "null"], "items": _NUMBER}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_STATUS = {"type": "string", "enum": ["insufficient_data", "ok", "warn", "alert"]}
_DRIFT_POLICY = DRIFT_POLICY.schema()
_GATE_POLICY = {**GATE_POLICY.schema(), "type": "object"}
#: The stored contract's client-supplied fields have the schema of their registration.
_REGISTERED = REGISTRATION.schema()["properties"]
_POSITIVE_CLASS = {
    **_REGISTERED["baseline"]["properties"]["eval"]["properties"]["calibrated"]["properties"][
        "positive_class"
    ],
    "description": "two-class multiclass readings: the binary view of the second class's"
    " probability (null for other readings)",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _record(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A reply object: at least the listed properties (replies may grow new ones)."""
    return {"type": "object", "properties": properties, "required": required}


#: One problem a verification found: which check, the row's id, its event's seq, what differs.
_PROBLEM = _record(
    {
        "check": {
            "type": "string",
            "enum": ["chain", "anchor", "keyed_head", "contract", "decision", "retirement"],
        },
        "seq": {"type": ["integer", "null"]},
        "problem": {"type": "string"},
        "differences": {"type": "object"},
    },
    ["check", "seq", "problem"],
)


def _reply(description: str, schema: dict[str, Any], media: str = JSON) -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


_ERROR_TEXT = {
    400: "malformed body (NaN/Infinity tokens: details name their fields)",
    401: "missing or invalid token",
    403: "role not allowed",
    404: "unknown model, contract or route (also a path segment holding a NUL)",
    409: "conflicts with stored state",
    413: "body over CALMON_MAX_BODY_BYTES",
    415: "not JSON",
    422: "invalid fields or parameters; details name each item and field",
    503: "database unavailable (Retry-After)",
}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _reply(_ERROR_TEXT[c], _ref("Error")) for c in codes}


_BIN = _record(
    {
        "lo": _FRACTION,
        "hi": _FRACTION,
        "n": _COUNT,
        "mean_confidence": _FRACTION,
        "accuracy": _FRACTION,
        "ci": _CI,
    },
    ["lo", "hi", "n", "mean_confidence", "accuracy", "ci"],
)

_READING_FIELDS: dict[str, Any] = {
    "n": _COUNT,
    "ece": _NULLABLE_NUMBER,
    "ece_debiased": _NULLABLE_NUMBER,
    "ece_ci": {"type": "array", "items": _NULLABLE_NUMBER},
    "calibration_p_value": _NULLABLE_NUMBER,
    "mce": _NULLABLE_NUMBER,
    "mce_n": {"type": ["integer", "null"]},
    "mce_supported": _NULLABLE_NUMBER,
    "mce_supported_n": {"type": ["integer", "null"]},
    "mce_min_rows": {"type": "integer"},
    "nll": _NULLABLE_NUMBER,
    "brier": _NULLABLE_NUMBER,
    "accuracy": _NULLABLE_NUMBER,
    "mean_confidence": _NULLABLE_NUMBER,
    "bins": {"type": "array", "items": _ref("Bin")},
    "label_counts": {"type": "array", "items": _COUNT},
    "classwise_ece": _NULLABLE_NUMBER,
    "auc": _NULLABLE_NUMBER,
    "prevalence": _NULLABLE_NUMBER,
    "mean_score": _NULLABLE_NUMBER,
    "threshold": _NULLABLE_NUMBER,
    "expected_cost": _NULLABLE_NUMBER,
    "positive_class": _POSITIVE_CLASS,
}

_CONTRACT_FIELDS: dict[str, Any] = {
    "id": {"type": "string"},
    "model": {"type": "string"},
    "version": {"type": "integer"},
    "checkpoint": {"type": "string"},
    "task": {"type": "string", "enum": ["multiclass", "binary"]},
    "classes": {"type": "array", "items": {"type": "string"}},
    "calibrator": _REGISTERED["calibrator"],
    "objective": {"type": "string"},
    "population": {"type": "string"},
    "outcome": {"type": "string"},
    "data_window": _REGISTERED["data_window"],
    "split": _REGISTERED["split"],
    "bin_edges": {"type": "array", "minItems": 2, "items": _FRACTION},
    "baseline": _REGISTERED["baseline"],
    "policy": _DRIFT_POLICY,
    "created_at": _TIMESTAMP,
    "created_by": {"type": "string"},
    "content_sha256": {"type": "string"},
    "retired": {"type": "boolean"},
    "retirement": {"type": ["object", "null"]},
    "warnings": {
        "type": "array",
        "items": {"type": "string"},
        "description": "in the replies of register and fit: what the reviewer should know of"
        " the stored calibrator (a parameter on the bound of the fit's search range)",
    },
}

#: Which contract a reading or decision used.
_CONTRACT_REF = _record(
    {
        "id": {"type": "string"},
        "model": {"type": "string"},
        "version": {"type": "integer"},
        "content_sha256": _SHA256,
    },
    ["id", "version"],
)

#: A status detector's evidence: the ECE level it tests and its e-value against the threshold.
_DETECTOR = _record(
    {
        "level": _NUMBER,
        "value": _NULLABLE_NUMBER,
        "threshold": _NULLABLE_NUMBER,
        "pattern": _NULLABLE_STRING,
        "view": _NULLABLE_STRING,
        "rows": {"type": ["integer", "null"]},
    },
    ["level", "value", "threshold"],
)

#: One part of an audit verification: whether it holds, how many rows it checked and failed.
_PART_CHECK = _record(
    {"valid": {"type": "boolean"}, "checked": _COUNT, "problem_count": _COUNT},
    ["valid", "checked", "problem_count"],
)

_PAIR_OF_MEASURES = _record(
    {"uncalibrated": _NULLABLE_NUMBER, "calibrated": _NULLABLE_NUMBER},
    ["uncalibrated", "calibrated"],
)

SCHEMAS: dict[str, Any] = {
    "Error": _record(
        {
            "error": _record(
                {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": _record(
                            {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                                "item": {"type": "integer"},
                            },
                            ["field", "message"],
                        ),
                    },
                    "details_total": {"type": "integer", "minimum": 0},
                },
                ["code", "message", "details"],
            )
        },
        ["error"],
    ),
    "Bin": _BIN,
    "Reading": _record(_READING_FIELDS, ["n", "ece", "nll", "brier", "accuracy", "bins"]),
    **{body.name: body.schema() for body in REQUEST_BODIES},
    "Contract": _record(
        _CONTRACT_FIELDS,
        ["id", "model", "version", "content_sha256", "created_at", "calibrator", "baseline"],
    ),
    "ContractList": _record(
        {
            "contracts": {"type": "array", "items": _ref("Contract")},
            "unreadable": {
                "type": "array",
                "description": "stored contracts whose fields cannot be read back",
                "items": _record(
                    {
                        "id": {"type": "string"},
                        "model": {"type": "string"},
                        "version": {"type": "integer"},
                        "problem": {"type": "string"},
                    },
                    ["id", "model", "version", "problem"],
                ),
            },
            "next_cursor": {"type": ["string", "null"]},
        },
        ["contracts", "unreadable", "next_cursor"],
    ),
    "Verification": _record(
        {
            "id": {"type": "string"},
            "content_sha256": _SHA256,
            "recomputed_sha256": _SHA256,
            "valid": {"type": "boolean"},
            "event": {"type": ["object", "null"]},
            "problems": {"type": "array", "items": _PROBLEM},
        },
        ["valid", "event", "problems"],
    ),
    "PredictionsAccepted": _record(
        {
            "accepted": {"type": "integer"},
            "duplicates": {"type": "integer"},
            "contract_id": {"type": "string"},
            "joined_pending_labels": {
                "type": "integer",
                "description": "labels that waited for these predictions and are now joined",
            },
            "discarded_pending_labels": {
                "type": "integer",
                "description": "labels that waited for these predictions and are deleted: the"
                " predictions' contract has no class by their name or index",
            },
        },
        [
            "accepted",
            "duplicates",
            "contract_id",
            "joined_pending_labels",
            "discarded_pending_labels",
        ],
    ),
    "LabelsApplied": _record(
        {
            "joined": {"type": "integer"},
            "pending": {"type": "integer"},
            "duplicates": {"type": "integer"},
            "conflicts": {"type": "array"},
            "rejected_pending": {"type": "integer"},
            "rejected_pending_ids": {"type": "array", "items": {"type": "string"}},
        },
        ["joined", "pending", "duplicates", "conflicts"],
    ),
    "Calibration": _record(
        {
            "model": {"type": "string"},
            "contract": _CONTRACT_REF,
            "contracts_in_window": {
                "type": "array",
                "items": _record(
                    {
                        "contract_id": {"type": "string"},
                        "version": {"type": "integer"},
                        "n_predictions": _COUNT,
                        "n_labeled": _COUNT,
                    },
                    ["contract_id", "version", "n_predictions", "n_labeled"],
                ),
            },
            "policy": _DRIFT_POLICY,
            "threshold": {
                **_NULLABLE_NUMBER,
                "description": "binary: the score above which the cost-minimising decision is"
                " positive, c_fp / (c_fp + c_fn); null for multiclass",
            },
            "notes": {"type": "array", "items": {"type": "string"}},
            "window": _record(
                {"name": _NULLABLE_STRING, "start": _TIMESTAMP, "end": _TIMESTAMP},
                ["start", "end"],
            ),
            "cohort": {"type": "string"},
            "n_predictions": {"type": "integer"},
            "n_labeled": {"type": "integer"},
            "label_coverage": _NULLABLE_NUMBER,
            "labels_unfolded": _COUNT,
            "last_fold_at": {"type": ["string", "null"], "format": "date-time"},
            "metrics": _record(_READING_FIELDS, ["n"]),
            "bins": {"type": "array", "items": _ref("Bin")},
            "baseline": _ref("Reading"),
            "drift": _record(
                {
                    "ece_delta": _NULLABLE_NUMBER,
                    "ece_debiased_delta": _NULLABLE_NUMBER,
                    "nll_delta": _NULLABLE_NUMBER,
                    "refit_temperature": _NULLABLE_NUMBER,
                    "refit_temperature_ci": {"type": ["array", "null"], "items": _NUMBER},
                    "confidence_psi": _NULLABLE_NUMBER,
                    "confidence_psi_no_shift": _NULLABLE_NUMBER,
                    "confidence_shift_p_value": _NULLABLE_NUMBER,
                    "prevalence_shift": _NULLABLE_NUMBER,
                    "expected_accuracy": _NULLABLE_NUMBER,
                    "expected_accuracy_ci": {"type": ["array", "null"], "items": _NUMBER},
                    "status": _STATUS,
                    "reasons": {"type": "array", "items": {"type": "string"}},
                    "detectors": _record(
                        {"alert": _DETECTOR, "warn": _DETECTOR}, ["alert", "warn"]
                    ),
                },
                ["status", "reasons"],
            ),
        },
        [
            "contract",
            "window",
            "cohort",
            "n_predictions",
            "n_labeled",
            "label_coverage",
            "metrics",
            "bins",
            "baseline",
            "drift",
            "labels_unfolded",
            "last_fold_at",
        ],
    ),
    "Cohorts": _record(
        {
            "model": {"type": "string"},
            "slices": {
                "type": "array",
                "items": _record(
                    {
                        "cohort": {"type": "string"},
                        "n_predictions": _COUNT,
                        "n_labeled": _COUNT,
                    },
                    ["cohort", "n_predictions", "n_labeled"],
                ),
            },
        },
        ["slices"],
    ),
    "GateDecision": _record(
        {
            "id": {"type": "string"},
            "contract_id": {"type": "string"},
            "model": {"type": "string"},
            "decided_at": _TIMESTAMP,
            "decided_by": {"type": "string"},
            "policy": _GATE_POLICY,
            "policy_sha256": _SHA256,
            "evidence_sha256": _SHA256,
            "decision": {"type": "string", "enum": ["pass", "fail"]},
            "checks": {
                "type": "array",
                "items": _record(
                    {
                        "name": {"type": "string"},
                        "passed": {"type": "boolean"},
                        "observed": {},
                        "threshold": {},
                        "message": {"type": "string"},
                    },
                    ["name", "passed", "message"],
                ),
            },
            "evidence": _record(
                {
                    "baseline_source": {"type": "string", "enum": ["measured", "supplied"]},
                    "source": {"type": "object"},
                    "contract": _CONTRACT_REF,
                    "n": _COUNT,
                    "positive_class": _POSITIVE_CLASS,
                    "nll": _PAIR_OF_MEASURES,
                    "brier": _PAIR_OF_MEASURES,
                    "nll_difference": _record(
                        {
                            "mean": _NULLABLE_NUMBER,
                            "lower_bound": _NULLABLE_NUMBER,
                            "tolerance": _NULLABLE_NUMBER,
                        },
                        ["mean", "lower_bound"],
                    ),
                    "bin_edges": {"type": "array", "items": _NUMBER},
                    "ece": _NULLABLE_NUMBER,
                    "ece_debiased": _NULLABLE_NUMBER,
                    "ece_ci": {"type": "array", "items": _NULLABLE_NUMBER},
                    "calibration_p_value": _NULLABLE_NUMBER,
                    "reliability": {"type": "array"},
                },
                ["baseline_source", "source", "reliability"],
            ),
        },
        ["id", "decision", "checks", "evidence"],
    ),
    "GateDecisions": _record(
        {
            "decisions": {"type": "array", "items": _ref("GateDecision")},
            "next_cursor": {"type": ["string", "null"]},
        },
        ["decisions"],
    ),
    "AuditEvents": _record(
        {"events": {"type": "array"}, "next_cursor": {"type": ["string", "null"]}},
        ["events", "next_cursor"],
    ),
    "ChainVerification": _record(
        {
            "valid": {"type": "boolean"},
            "events": _COUNT,
            "head": {
                **_record({"seq": _COUNT, "sha256": _SHA256, "ts": _TIMESTAMP}, ["seq", "sha256"]),
                "type": ["object", "null"],
            },
            "chain": _record(
                {
                    "valid": {"type": "boolean"},
                    "first_invalid_seq": {"type": ["integer", "null"]},
                    "reason": _NULLABLE_STRING,
                    "scheme": {"type": "string"},
                    "keyed_from_seq": {"type": ["integer", "null"]},
                    "key_id": _NULLABLE_STRING,
                },
                ["valid"],
            ),
            "anchor": {"type": ["object", "null"]},
            "contracts": _PART_CHECK,
            "decisions": _PART_CHECK,
            "retirements": _PART_CHECK,
            "checked": _record(
                {name: _COUNT for name in ("events", "contracts", "decisions", "retirements")},
                ["events", "contracts", "decisions", "retirements"],
            ),
            "keyed_head": {"type": ["object", "null"]},
            "problem_count": _COUNT,
            "problems": {"type": "array", "maxItems": LISTED_PROBLEMS, "items": _PROBLEM},
        },
        ["valid", "checked", "keyed_head", "problem_count", "problems"],
    ),
    "History": _record(
        {
            "model": {"type": "string"},
            "cohort": {"type": "string"},
            "start": {"type": "string"},
            "end": {"type": "string"},
            "step_seconds": {"type": "integer"},
            "contract": _record({"id": {"type": "string"}, "version": {"type": "integer"}}, ["id"]),
            "policy": _DRIFT_POLICY,
            "baseline": _record(
                {"ece": _NULLABLE_NUMBER, "ece_debiased": _NULLABLE_NUMBER}, ["ece"]
            ),
            "points": {
                "type": "array",
                "items": _record(
                    {
                        "start": {"type": "string"},
                        "contract_version": {"type": ["integer", "null"]},
                        "n_predictions": {"type": "integer"},
                        "n_labeled": {"type": "integer"},
                        "label_coverage": _NULLABLE_NUMBER,
                        "ece": _NULLABLE_NUMBER,
                        "ece_debiased": _NULLABLE_NUMBER,
                        "ece_ci": {"type": ["array", "null"], "items": _NUMBER},
                        "nll": _NULLABLE_NUMBER,
                        "brier": _NULLABLE_NUMBER,
                        "accuracy": _NULLABLE_NUMBER,
                        "refit_temperature": _NULLABLE_NUMBER,
                        "refit_temperature_ci": _NULLABLE_PAIR,
                        "confidence_psi": _NULLABLE_NUMBER,
                        "confidence_psi_no_shift": _NULLABLE_NUMBER,
                        "status": _STATUS,
                        "labels_unfolded": _COUNT,
                        "last_fold_at": {"type": ["string", "null"], "format": "date-time"},
                    },
                    [
                        "start",
                        "n_predictions",
                        "n_labeled",
                        "status",
                        "labels_unfolded",
                        "last_fold_at",
                    ],
                ),
            },
        },
        ["model", "cohort", "start", "end", "step_seconds", "points"],
    ),
    "Status": _record({"status": {"type": "string"}, "database": {"type": "string"}}, ["status"]),
}


def _param(
    name: str, where: str = "query", schema: dict[str, Any] | None = None, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema or {"type": "string"},
    }


def _op(
    operation_id: str,
    summary: str,
    replies: dict[str, Any],
    body: str | None = None,
    params: list[dict[str, Any]] | None = None,
    auth: bool = True,
    errors: tuple[int, ...] = (),
    links: dict[str, Any] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "responses": {**replies},
    }
    if auth:
        operation["responses"].update(_errors(401, 403, *errors))
    else:
        operation["security"] = []
        operation["responses"].update(_errors(*errors))
    if body:
        operation["requestBody"] = {
            "required": True,
            "content": {JSON: {"schema": _ref(body)}},
        }
        operation["responses"].update(_errors(400, 413, 415, 422))
    if params:
        operation["parameters"] = params
        if any(p["in"] == "query" for p in params):
            operation["responses"].update(_errors(422))
        if any(p["in"] == "path" for p in params):
            operation["responses"].update(_errors(404))
    if links:
        first = next(iter(replies))
        operation["responses"][first]["links"] = links
    return operation


_CONTRACT_ID = _param("contract_id", "path")
_MODEL_PATH = _param("model", "path")
_LIMIT = _param("limit", schema={"type": "integer", "minimum": 1, "maximum": MAX_LIMIT})
_CURSOR = _param("cursor", schema=_NON_EMPTY)
_MODEL_QUERY = _param("model", schema=_NAME)
_WINDOW_PARAMS = [
    _param("window", schema={"type": "string", "pattern": "^[1-9][0-9]{0,7}[smhd]$"}),
    _param("start", schema=_TIMESTAMP),
    _param("end", schema=_TIMESTAMP),
    _param("cohort", schema=_NON_EMPTY),
]
_HISTORY_PARAMS = [
    _param("start", schema=_TIMESTAMP),
    _param("end", schema=_TIMESTAMP),
    _param("step", schema={"type": "string", "pattern": "^[1-9][0-9]{0,7}[smhd]$"}),
    _param("cohort", schema=_NON_EMPTY),
]
#: Fold the model's labels waiting for the fold before reading (``service.stream.fold``).
_CONSISTENT = _param("consistent", schema={"type": "string", "enum": ["true", "false"]})
_SVG = _reply("SVG", {"type": "string"}, "image/svg+xml")


def _links_from_contract() -> dict[str, Any]:
    """Links from a stored contract (reply of register and fit) to what takes its id or model."""
    by_id = {"path.contract_id": "$response.body#/id"}
    by_model = {"path.model": "$response.body#/model"}
    return {
        "GetContract": {"operationId": "getContract", "parameters": by_id},
        "VerifyContract": {"operationId": "verifyContract", "parameters": by_id},
        "RetireContract": {"operationId": "retireContract", "parameters": by_id},
        "ContractDiagram": {"operationId": "contractDiagram", "parameters": by_id},
        "ActiveContract": {"operationId": "activeContract", "parameters": by_model},
        "Calibration": {"operationId": "calibration", "parameters": by_model},
        "ModelDiagram": {"operationId": "modelDiagram", "parameters": by_model},
        "HistoryDiagram": {"operationId": "historyDiagram", "parameters": by_model},
        "Cohorts": {"operationId": "cohorts", "parameters": by_model},
        "Gate": {"operationId": "decideGate", "requestBody": {"contract_id": "$response.body#/id"}},
        "Predictions": {
            "operationId": "ingestPredictions",
            "requestBody": {"model": "$response.body#/model"},
        },
        "Labels": {
            "operationId": "ingestLabels",
            "requestBody": {"model": "$response.body#/model"},
        },
        "ListContracts": {
            "operationId": "listContracts",
            "parameters": {"query.model": "$response.body#/model"},
        },
    }


PATHS: dict[str, Any] = {
    "/v1/contracts": {
        "post": _op(
            "registerContract",
            "Register a contract fitted elsewhere",
            {"201": _reply("the stored contract", _ref("Contract"))},
            "ContractRegistration",
            links=_links_from_contract(),
        ),
        "get": _op(
            "listContracts",
            "List contracts, newest first",
            {"200": _reply("a page", _ref("ContractList"))},
            params=[_MODEL_QUERY, _param("active_at", schema=_TIMESTAMP), _LIMIT, _CURSOR],
        ),
    },
    "/v1/contracts/fit": {
        "post": _op(
            "fitContract",
            "Fit a calibrator on fit, measure fit and eval, store the contract",
            {"201": _reply("the stored contract", _ref("Contract"))},
            "ContractFit",
            links=_links_from_contract(),
        )
    },
    "/v1/contracts/{contract_id}": {
        "get": _op(
            "getContract",
            "One contract",
            {"200": _reply("the contract", _ref("Contract"))},
            params=[_CONTRACT_ID],
        )
    },
    "/v1/contracts/{contract_id}/verify": {
        "get": _op(
            "verifyContract",
            "Recompute the content hash; check it against the contract's creation event",
            {"200": _reply("the check", _ref("Verification"))},
            params=[_CONTRACT_ID],
        )
    },
    "/v1/contracts/{contract_id}/retire": {
        "post": _op(
            "retireContract",
            "Retire a contract (an audit event)",
            {"200": _reply("the contract", _ref("Contract"))},
            "Retirement",
            params=[_CONTRACT_ID],
            errors=(409,),
        )
    },
    "/v1/models/{model}/contract": {
        "get": _op(
            "activeContract",
            "The active contract at a time",
            {"200": _reply("the contract", _ref("Contract"))},
            params=[_MODEL_PATH, _param("at", schema=_TIMESTAMP)],
        )
    },
    "/v1/predictions": {
        "post": _op(
            "ingestPredictions",
            "Store a batch of predictions (idempotent per id)",
            {"200": _reply("counts", _ref("PredictionsAccepted"))},
            "PredictionBatch",
            errors=(404, 409, 503),
        )
    },
    "/v1/labels": {
        "post": _op(
            "ingestLabels",
            "Join a batch of labels",
            {"200": _reply("counts", _ref("LabelsApplied"))},
            "LabelBatch",
            errors=(404, 503),
        )
    },
    "/v1/models/{model}/calibration": {
        "get": _op(
            "calibration",
            "The reading of a window and cohort slice",
            {"200": _reply("reading, bins, baseline, drift", _ref("Calibration"))},
            params=[_MODEL_PATH, *_WINDOW_PARAMS, _CONSISTENT],
        )
    },
    "/v1/models/{model}/history": {
        "get": _op(
            "history",
            "A cohort slice's readings per step (step a multiple of 5 minutes; default 7 days at"
            " 1 h), as JSON or (format=csv) as CSV",
            {
                "200": {
                    "description": "one point per step, oldest first",
                    "content": {
                        JSON: {"schema": _ref("History")},
                        "text/csv": {"schema": {"type": "string"}},
                    },
                }
            },
            params=[
                _MODEL_PATH,
                *_HISTORY_PARAMS,
                _param("format", schema={"type": "string", "enum": ["json", "csv"]}),
                _CONSISTENT,
            ],
        )
    },
    "/v1/models/{model}/history.svg": {
        "get": _op(
            "historyDiagram",
            "The ECE-over-time chart (SVG) of a cohort slice: the history's steps with the debiased"
            " ECE and its 95% interval, the policy and baseline lines, statuses and label coverage",
            {"200": _SVG},
            params=[_MODEL_PATH, *_HISTORY_PARAMS],
        )
    },
    "/v1/models/{model}/reliability.svg": {
        "get": _op(
            "modelDiagram",
            "The reliability diagram (SVG) of a window and cohort, with bin counts",
            {"200": _SVG},
            params=[_MODEL_PATH, *_WINDOW_PARAMS],
        )
    },
    "/v1/contracts/{contract_id}/reliability.svg": {
        "get": _op(
            "contractDiagram",
            "A contract's baseline reliability diagram (SVG)",
            {"200": _SVG},
            params=[
                _CONTRACT_ID,
                _param("split", schema={"type": "string", "enum": ["fit", "eval"]}),
                _param("which", schema={"type": "string", "enum": ["calibrated", "uncalibrated"]}),
            ],
        )
    },
    "/v1/models/{model}/cohorts": {
        "get": _op(
            "cohorts",
            "Cohort slices seen",
            {"200": _reply("slices with counts", _ref("Cohorts"))},
            params=[_MODEL_PATH],
        )
    },
    "/v1/gate": {
        "post": _op(
            "decideGate",
            "Evaluate a contract against a gate policy; stored",
            {"201": _reply("the decision with evidence", _ref("GateDecision"))},
            "GateRequest",
            errors=(404,),
        )
    },
    "/v1/gate/decisions": {
        "get": _op(
            "gateDecisions",
            "Past gate decisions",
            {"200": _reply("a page", _ref("GateDecisions"))},
            params=[_param("model"), _param("contract_id"), _LIMIT, _CURSOR],
        )
    },
    "/v1/audit/events": {
        "get": _op(
            "auditEvents",
            "The audit log, as JSON or (format=csv) as CSV with the next cursor in X-Next-Cursor",
            {
                "200": {
                    "description": "a page",
                    "content": {
                        JSON: {"schema": _ref("AuditEvents")},
                        "text/csv": {"schema": {"type": "string"}},
                    },
                }
            },
            params=[
                _param("model"),
                _param("type"),
                _param("since", schema=_TIMESTAMP),
                _param("until", schema=_TIMESTAMP),
                _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000}),
                _CURSOR,
                _param("format", schema={"type": "string", "enum": ["json", "csv"]}),
            ],
        )
    },
    "/v1/audit/verify": {
        "get": _op(
            "verifyAudit",
            "Verify the audit log, its keyed head and every contract, gate decision and "
            "retirement against its event (and an anchor: expected_seq with expected_sha256)",
            {"200": _reply("result", _ref("ChainVerification"))},
            params=[
                _param(
                    "expected_seq", schema={"type": "integer", "minimum": 1, "maximum": MAX_SEQ}
                ),
                _param("expected_sha256", schema={"type": "string", "pattern": "^[0-9a-f]{64}$"}),
            ],
        )
    },
    "/v1/openapi.json": {
        "get": _op("openapi", "This document", {"200": _reply("OpenAPI 3.1", {"type": "object"})})
    },
    "/metrics": {
        "get": _op(
            "metrics",
            "Prometheus exposition",
            {"200": _reply("text format", {"type": "string"}, "text/plain")},
            auth=False,
        )
    },
    "/healthz": {
        "get": _op("healthz", "Liveness", {"200": _reply("ok", _ref("Status"))}, auth=False)
    },
    "/readyz": {
        "get": _op(
            "readyz",
            "Readiness: database reachable, schema at head",
            {"200": _reply("ready", _ref("Status"))},
            auth=False,
            errors=(503,),
        )
    },
}


def document() -> dict[str, Any]:
    """The whole OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "calmon",
            "version": "1",
            "description": "Calibration monitoring: contracts, streams, readings, gate.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "paths": PATHS,
    }


@bp.get("/openapi.json")
@requires(Permission.READ)
def openapi() -> Response:
    """The OpenAPI description of this API."""
    return jsonify(document())
