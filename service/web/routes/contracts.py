"""Contracts: register, fit, list, get, verify, retire, and a model's active contract."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify
from werkzeug.routing import BaseConverter

from service.auth.tokens import Permission
from service.common.clock import utcnow
from service.common.errors import ErrorCollector
from service.common.values import NAME_PATTERN, expect_str
from service.contracts import service as contracts_service
from service.contracts.model import Contract
from service.contracts.requests import parse_fit_request, parse_registration, parse_retirement
from service.web.auth import current_principal, requires
from service.web.bodies import json_body
from service.web.db_session import db_session
from service.web.queries import check_known, cursor_arg, encode_cursor, limit_arg, timestamp_arg

bp = Blueprint("contracts", __name__, url_prefix="/v1")


class ContractIdConverter(BaseConverter):
    """A contract id in ``/v1/contracts/{id}``: any path segment but ``fit``, which is
    ``POST /v1/contracts/fit``'s own (so ``OPTIONS`` on it allows POST alone, not GET)."""

    regex = r"(?!fit$)[^/]+"


def _created(payload: dict[str, Any]) -> Response:
    response = jsonify(payload)
    response.status_code = 201
    return response


@bp.post("/contracts")
@requires(Permission.ADMIN)
def register() -> Response:
    """Register a contract fitted elsewhere."""
    spec = parse_registration(json_body())
    contract = contracts_service.register_contract(
        db_session(), spec, actor=current_principal().name
    )
    return _created(
        {**contract.to_dict(), "warnings": contracts_service.contract_warnings(contract)}
    )


@bp.post("/contracts/fit")
@requires(Permission.ADMIN)
def fit() -> Response:
    """Fit a calibrator on the fit set, measure the baseline on both sets, register it."""
    request = parse_fit_request(json_body())
    contract = contracts_service.fit_contract(db_session(), request, actor=current_principal().name)
    return _created(
        {**contract.to_dict(), "warnings": contracts_service.contract_warnings(contract)}
    )


@bp.get("/contracts")
@requires(Permission.READ)
def list_contracts() -> Response:
    """Contracts newest first, optionally of one model or active at a time; paginated."""
    check_known(("model", "active_at", "limit", "cursor"))
    limit = limit_arg()
    rows = contracts_service.list_contracts(
        db_session(),
        model=_model_arg(),
        active_at=timestamp_arg("active_at"),
        before_seq=cursor_arg(),
        limit=limit + 1,
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1][0]) if len(rows) > limit else None
    return jsonify(
        {
            "contracts": [c.to_dict() for _, c in page if isinstance(c, Contract)],
            "unreadable": [c.to_dict() for _, c in page if not isinstance(c, Contract)],
            "next_cursor": next_cursor,
        }
    )


def _model_arg() -> str | None:
    from flask import request

    raw = request.args.get("model")
    if raw is None:
        return None
    errors = ErrorCollector()
    expect_str(raw, "model", errors, pattern=NAME_PATTERN)
    errors.raise_if_any("invalid model")
    return raw


@bp.get("/contracts/<contract_id:contract_id>")
@requires(Permission.READ)
def get_contract(contract_id: str) -> Response:
    """One contract with its content hash and retirement, if any."""
    return jsonify(contracts_service.find_contract(db_session(), contract_id).to_dict())


@bp.get("/contracts/<contract_id>/verify")
@requires(Permission.READ)
def verify(contract_id: str) -> Response:
    """Recompute the content hash from the stored record; check it against the stored hash and
    the contract's creation event."""
    return jsonify(contracts_service.verify_contract(db_session(), contract_id))


@bp.post("/contracts/<contract_id>/retire")
@requires(Permission.ADMIN)
def retire(contract_id: str) -> Response:
    """Retire a contract: an audit event; the contract itself never changes."""
    reason = parse_retirement(json_body())
    contract = contracts_service.retire_contract(
        db_session(), contract_id, reason=reason, actor=current_principal().name
    )
    return jsonify(contract.to_dict())


@bp.get("/models/<model>/contract")
@requires(Permission.READ)
def active_contract(model: str) -> Response:
    """The model's active contract at ``at`` (default now)."""
    check_known(("at",))
    at = timestamp_arg("at") or utcnow()
    return jsonify(contracts_service.active_contract(db_session(), model, at).to_dict())
