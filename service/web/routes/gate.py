"""The deployment review gate and its stored decisions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from service.auth.tokens import Permission
from service.common.values import format_timestamp
from service.gate import service as gate_service
from service.gate.requests import parse_gate_request
from service.gate.store import GateDecision
from service.web.auth import current_principal, requires
from service.web.bodies import json_body
from service.web.db_session import db_session
from service.web.queries import check_known, cursor_arg, encode_cursor, limit_arg

bp = Blueprint("gate", __name__, url_prefix="/v1/gate")


def decision_dict(d: GateDecision) -> dict[str, Any]:
    return {
        "id": d.id,
        "contract_id": d.contract_id,
        "model": d.model,
        "decided_at": format_timestamp(d.decided_at),
        "decided_by": d.decided_by,
        "decision": d.decision,
        "checks": d.checks,
        "evidence": d.evidence,
        "policy": d.policy,
        "policy_sha256": d.policy_sha256,
        "evidence_sha256": d.evidence_sha256,
    }


@bp.post("")
@requires(Permission.GATE)
def decide() -> Response:
    """Evaluate a contract (or a fresh held-out set) against a policy; store the decision.

    Needs the ``gate`` permission (roles ``gate`` and ``admin``): a CI pipeline's token may ask
    the gate without being able to register or retire contracts.
    """
    gate_request = parse_gate_request(json_body())
    decision = gate_service.decide_gate(db_session(), gate_request, actor=current_principal().name)
    response = jsonify(decision_dict(decision))
    response.status_code = 201
    return response


@bp.get("/decisions")
@requires(Permission.READ)
def decisions() -> Response:
    """Past decisions, newest first, by model and contract; paginated."""
    check_known(("model", "contract_id", "limit", "cursor"))
    limit = limit_arg()
    rows = gate_service.list_decisions(
        db_session(),
        model=request.args.get("model"),
        contract_id=request.args.get("contract_id"),
        before_seq=cursor_arg(),
        limit=limit + 1,
    )
    page = rows[:limit]
    return jsonify(
        {
            "decisions": [decision_dict(d) for d in page],
            "next_cursor": encode_cursor(page[-1].seq) if len(rows) > limit else None,
        }
    )
