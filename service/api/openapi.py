"""The OpenAPI 3.1 description of calmon's HTTP API, served at ``GET /v1/openapi.json``."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from service.api.auth import requires
from service.auth import Permission

bp = Blueprint("openapi", __name__, url_prefix="/v1")

_NUMBER = {"type": "number"}
_NULLABLE_NUMBER = {"type": ["number", "null"]}
_STRING = {"type": "string", "minLength": 1}
_TIMESTAMP = {"type": "string", "format": "date-time"}
_ID = {"type": "string", "minLength": 1, "maxLength": 200}
_MODEL = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"}
_LABEL = {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


def _reply(
    description: str, schema: dict[str, Any] | None = None, media: str = "application/json"
) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "malformed body",
        401: "missing or invalid token",
        403: "role not allowed",
        404: "unknown model, contract or route",
        409: "conflicts with stored state",
        413: "body over CALMON_MAX_BODY_BYTES",
        415: "not JSON",
        422: "invalid fields; details name each item and field",
        503: "database unavailable (Retry-After)",
    }
    return {str(c): _reply(text[c], _ref("Error")) for c in codes}


_READING = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "ece": _NULLABLE_NUMBER,
        "ece_debiased": _NULLABLE_NUMBER,
        "ece_ci": {"type": "array", "items": _NULLABLE_NUMBER},
        "calibration_p_value": _NULLABLE_NUMBER,
        "mce": _NULLABLE_NUMBER,
        "mce_n": {"type": ["integer", "null"]},
        "nll": _NULLABLE_NUMBER,
        "brier": _NULLABLE_NUMBER,
        "accuracy": _NULLABLE_NUMBER,
        "mean_confidence": _NULLABLE_NUMBER,
        "bins": {"type": "array", "items": _ref("Bin")},
        "label_counts": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["n", "ece", "nll", "brier", "accuracy", "bins"],
}

_SPEC_FIELDS: dict[str, Any] = {
    "model": _MODEL,
    "checkpoint": _STRING,
    "task": {"type": "string", "enum": ["multiclass", "binary"]},
    "classes": {"type": "array", "items": _STRING},
    "objective": {"type": "string", "enum": ["nll"]},
    "population": _STRING,
    "outcome": _STRING,
    "data_window": _object({"start": _TIMESTAMP, "end": _TIMESTAMP}, ["start", "end"]),
    "split": _object(
        {
            "method": _STRING,
            "fit_fingerprint": {"type": ["string", "null"]},
            "eval_fingerprint": {"type": ["string", "null"]},
        },
        ["method"],
    ),
    "bin_edges": {"type": "array", "items": _NUMBER, "minItems": 2},
    "policy": _ref("DriftPolicy"),
}
_SPEC_REQUIRED = ["model", "checkpoint", "task", "population", "outcome", "data_window", "split"]

SCHEMAS: dict[str, Any] = {
    "Error": _object(
        {
            "error": _object(
                {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": _object(
                            {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                                "item": {"type": "integer"},
                            },
                            ["field", "message"],
                        ),
                    },
                },
                ["code", "message", "details"],
            )
        },
        ["error"],
    ),
    "Bin": {
        "type": "object",
        "properties": {
            "lo": _NUMBER,
            "hi": _NUMBER,
            "n": {"type": "integer"},
            "mean_confidence": _NUMBER,
            "accuracy": _NUMBER,
            "ci": {"type": "array", "items": _NUMBER},
        },
        "required": ["lo", "hi", "n", "mean_confidence", "accuracy", "ci"],
    },
    "Reading": _READING,
    "DriftPolicy": _object(
        {
            "max_ece": _NUMBER,
            "max_ece_increase": _NUMBER,
            "min_labeled": {"type": "integer", "minimum": 0},
            "c_fp": _NUMBER,
            "c_fn": _NUMBER,
        }
    ),
    "LabeledSet": {
        "type": "object",
        "properties": {
            "logits": {"type": "array", "items": {"type": "array", "items": _NUMBER}},
            "scores": {"type": "array", "items": _NUMBER},
            "labels": {"type": "array", "items": _LABEL},
        },
        "required": ["labels"],
        "additionalProperties": False,
    },
    "ContractRegistration": _object(
        {
            **_SPEC_FIELDS,
            "calibrator": {
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": ["temperature", "platt", "identity"]},
                    "temperature": _NUMBER,
                    "slope": _NUMBER,
                    "intercept": _NUMBER,
                },
                "required": ["method"],
            },
            "baseline": {"type": "object"},
        },
        [*_SPEC_REQUIRED, "calibrator", "baseline"],
    ),
    "ContractFit": _object(
        {
            **_SPEC_FIELDS,
            "method": {"type": "string", "enum": ["temperature", "platt"]},
            "fit": _ref("LabeledSet"),
            "eval": _ref("LabeledSet"),
        },
        [*_SPEC_REQUIRED, "method", "fit", "eval"],
    ),
    "Contract": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer"},
            "content_sha256": {"type": "string"},
            "created_at": _TIMESTAMP,
            "created_by": {"type": "string"},
            "retired": {"type": "boolean"},
            "calibrator": {"type": "object"},
            "baseline": {"type": "object"},
        },
        "required": ["id", "version", "content_sha256", "created_at", "calibrator", "baseline"],
    },
    "ContractList": {
        "type": "object",
        "properties": {
            "contracts": {"type": "array", "items": _ref("Contract")},
            "next_cursor": {"type": ["string", "null"]},
        },
        "required": ["contracts", "next_cursor"],
    },
    "Verification": {
        "type": "object",
        "properties": {"valid": {"type": "boolean"}},
        "required": ["valid"],
    },
    "Retirement": _object({"reason": _STRING}, ["reason"]),
    "PredictionBatch": _object(
        {
            "model": _MODEL,
            "contract_id": {"type": "string"},
            "predictions": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": _ID,
                        "ts": _TIMESTAMP,
                        "cohort": {
                            "type": "object",
                            "maxProperties": 8,
                            "additionalProperties": {"type": "string", "maxLength": 64},
                        },
                        "logits": {"type": "array", "items": _NUMBER},
                        "score": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["id", "ts"],
                    "additionalProperties": False,
                },
            },
        },
        ["model", "predictions"],
    ),
    "PredictionsAccepted": {
        "type": "object",
        "properties": {
            "accepted": {"type": "integer"},
            "duplicates": {"type": "integer"},
            "contract_id": {"type": "string"},
        },
        "required": ["accepted", "duplicates", "contract_id"],
    },
    "LabelBatch": _object(
        {
            "model": _MODEL,
            "labels": {
                "type": "array",
                "minItems": 1,
                "items": _object(
                    {"id": _ID, "label": _LABEL, "ts": _TIMESTAMP}, ["id", "label", "ts"]
                ),
            },
        },
        ["model", "labels"],
    ),
    "LabelsApplied": {
        "type": "object",
        "properties": {
            "joined": {"type": "integer"},
            "pending": {"type": "integer"},
            "duplicates": {"type": "integer"},
            "conflicts": {"type": "array"},
        },
        "required": ["joined", "pending", "duplicates", "conflicts"],
    },
    "Calibration": {
        "type": "object",
        "properties": {
            "contract": {"type": "object"},
            "window": {"type": "object"},
            "cohort": {"type": "string"},
            "n_predictions": {"type": "integer"},
            "n_labeled": {"type": "integer"},
            "label_coverage": _NULLABLE_NUMBER,
            "metrics": {"type": "object"},
            "bins": {"type": "array", "items": _ref("Bin")},
            "baseline": _READING,
            "drift": {
                "type": "object",
                "properties": {
                    "ece_delta": _NULLABLE_NUMBER,
                    "ece_debiased_delta": _NULLABLE_NUMBER,
                    "nll_delta": _NULLABLE_NUMBER,
                    "refit_temperature": _NULLABLE_NUMBER,
                    "refit_temperature_ci": {
                        "type": ["array", "null"],
                        "items": _NUMBER,
                    },
                    "confidence_psi": _NULLABLE_NUMBER,
                    "confidence_psi_no_shift": _NULLABLE_NUMBER,
                    "confidence_shift_p_value": _NULLABLE_NUMBER,
                    "prevalence_shift": _NULLABLE_NUMBER,
                    "expected_accuracy": _NULLABLE_NUMBER,
                    "expected_accuracy_ci": {"type": ["array", "null"], "items": _NUMBER},
                    "status": {
                        "type": "string",
                        "enum": ["insufficient_data", "ok", "warn", "alert"],
                    },
                    "reasons": {"type": "array", "items": _STRING},
                },
                "required": ["status", "reasons"],
            },
        },
        "required": [
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
        ],
    },
    "Cohorts": {
        "type": "object",
        "properties": {"slices": {"type": "array"}},
        "required": ["slices"],
    },
    "GateRequest": _object(
        {
            "contract_id": {"type": "string"},
            "policy": _object(
                {
                    "max_ece": _NUMBER,
                    "max_ece_ci_upper": _NUMBER,
                    "min_eval_samples": {"type": "integer", "minimum": 0},
                    "min_bin_samples": {"type": "integer", "minimum": 0},
                    "require_nll_improvement": {"type": "boolean"},
                    "require_disjoint_eval": {"type": "boolean"},
                }
            ),
            "evaluation": _ref("LabeledSet"),
        },
        ["contract_id"],
    ),
    "GateDecision": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "decision": {"type": "string", "enum": ["pass", "fail"]},
            "checks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "passed": {"type": "boolean"},
                        "observed": {},
                        "threshold": {},
                        "message": {"type": "string"},
                    },
                },
            },
            "evidence": {"type": "object"},
        },
        "required": ["id", "decision", "checks", "evidence"],
    },
    "GateDecisions": {
        "type": "object",
        "properties": {"decisions": {"type": "array", "items": _ref("GateDecision")}},
        "required": ["decisions"],
    },
    "AuditEvents": {
        "type": "object",
        "properties": {"events": {"type": "array"}, "next_cursor": {"type": ["string", "null"]}},
        "required": ["events", "next_cursor"],
    },
    "ChainVerification": {
        "type": "object",
        "properties": {"valid": {"type": "boolean"}, "events": {"type": "integer"}},
        "required": ["valid", "events"],
    },
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
    summary: str,
    replies: dict[str, Any],
    body: str | None = None,
    params: list[dict[str, Any]] | None = None,
    auth: bool = True,
    errors: tuple[int, ...] = (),
) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": {**replies}}
    if auth:
        operation["responses"].update(_errors(401, 403, *errors))
    else:
        operation["security"] = []
    if body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
        operation["responses"].update(_errors(400, 413, 415, 422))
    if params:
        operation["parameters"] = params
    return operation


_CONTRACT_ID = _param("contract_id", "path")
_MODEL_PATH = _param("model", "path")
_LIMIT = _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 500})
_CURSOR = _param("cursor")
_WINDOW_PARAMS = [
    _param("window"),
    _param("start", schema=_TIMESTAMP),
    _param("end", schema=_TIMESTAMP),
    _param("cohort"),
]

PATHS: dict[str, Any] = {
    "/v1/contracts": {
        "post": _op(
            "Register a contract fitted elsewhere",
            {"201": _reply("the stored contract", _ref("Contract"))},
            "ContractRegistration",
        ),
        "get": _op(
            "List contracts, newest first",
            {"200": _reply("a page", _ref("ContractList"))},
            params=[_param("model"), _param("active_at", schema=_TIMESTAMP), _LIMIT, _CURSOR],
            errors=(422,),
        ),
    },
    "/v1/contracts/fit": {
        "post": _op(
            "Fit a calibrator on fit, measure fit and eval, store the contract",
            {"201": _reply("the stored contract", _ref("Contract"))},
            "ContractFit",
        )
    },
    "/v1/contracts/{contract_id}": {
        "get": _op(
            "One contract",
            {"200": _reply("the contract", _ref("Contract"))},
            params=[_CONTRACT_ID],
            errors=(404,),
        )
    },
    "/v1/contracts/{contract_id}/verify": {
        "get": _op(
            "Recompute the content hash",
            {"200": _reply("the check", _ref("Verification"))},
            params=[_CONTRACT_ID],
            errors=(404,),
        )
    },
    "/v1/contracts/{contract_id}/retire": {
        "post": _op(
            "Retire a contract (an audit event)",
            {"200": _reply("the contract", _ref("Contract"))},
            "Retirement",
            params=[_CONTRACT_ID],
            errors=(404, 409),
        )
    },
    "/v1/models/{model}/contract": {
        "get": _op(
            "The active contract at a time",
            {"200": _reply("the contract", _ref("Contract"))},
            params=[_MODEL_PATH, _param("at", schema=_TIMESTAMP)],
            errors=(404, 422),
        )
    },
    "/v1/predictions": {
        "post": _op(
            "Store a batch of predictions (idempotent per id)",
            {"200": _reply("counts", _ref("PredictionsAccepted"))},
            "PredictionBatch",
            errors=(404, 409, 503),
        )
    },
    "/v1/labels": {
        "post": _op(
            "Join a batch of labels",
            {"200": _reply("counts", _ref("LabelsApplied"))},
            "LabelBatch",
            errors=(404, 503),
        )
    },
    "/v1/models/{model}/calibration": {
        "get": _op(
            "The reading of a window and cohort slice",
            {"200": _reply("reading, bins, baseline, drift", _ref("Calibration"))},
            params=[_MODEL_PATH, *_WINDOW_PARAMS],
            errors=(404, 422),
        )
    },
    "/v1/models/{model}/reliability.svg": {
        "get": _op(
            "The reliability diagram (SVG) of a window and cohort, with bin counts",
            {"200": _reply("SVG", {"type": "string"}, "image/svg+xml")},
            params=[_MODEL_PATH, *_WINDOW_PARAMS],
            errors=(404, 422),
        )
    },
    "/v1/contracts/{contract_id}/reliability.svg": {
        "get": _op(
            "A contract's baseline reliability diagram (SVG)",
            {"200": _reply("SVG", {"type": "string"}, "image/svg+xml")},
            params=[
                _CONTRACT_ID,
                _param("split", schema={"type": "string", "enum": ["fit", "eval"]}),
                _param("which", schema={"type": "string", "enum": ["calibrated", "uncalibrated"]}),
            ],
            errors=(404, 422),
        )
    },
    "/v1/models/{model}/cohorts": {
        "get": _op(
            "Cohort slices seen",
            {"200": _reply("slices with counts", _ref("Cohorts"))},
            params=[_MODEL_PATH],
            errors=(404,),
        )
    },
    "/v1/gate": {
        "post": _op(
            "Evaluate a contract against a gate policy; stored",
            {"201": _reply("the decision with evidence", _ref("GateDecision"))},
            "GateRequest",
            errors=(404,),
        )
    },
    "/v1/gate/decisions": {
        "get": _op(
            "Past gate decisions",
            {"200": _reply("a page", _ref("GateDecisions"))},
            params=[_param("model"), _param("contract_id"), _LIMIT, _CURSOR],
            errors=(422,),
        )
    },
    "/v1/audit/events": {
        "get": _op(
            "The audit log",
            {"200": _reply("a page", _ref("AuditEvents"))},
            params=[
                _param("model"),
                _param("type"),
                _param("since", schema=_TIMESTAMP),
                _param("until", schema=_TIMESTAMP),
                _LIMIT,
                _CURSOR,
                _param("format", schema={"type": "string", "enum": ["json", "csv"]}),
            ],
            errors=(422,),
        )
    },
    "/v1/audit/verify": {
        "get": _op(
            "Verify the audit hash chain", {"200": _reply("result", _ref("ChainVerification"))}
        )
    },
    "/v1/openapi.json": {"get": _op("This document", {"200": _reply("OpenAPI 3.1")})},
    "/metrics": {
        "get": _op(
            "Prometheus exposition",
            {"200": _reply("text format", {"type": "string"}, "text/plain")},
            auth=False,
        )
    },
    "/healthz": {"get": _op("Liveness", {"200": _reply("ok")}, auth=False)},
    "/readyz": {
        "get": _op(
            "Readiness: database reachable, schema at head",
            {"200": _reply("ready"), **_errors(503)},
            auth=False,
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
