"""The deployment review gate and its stored decisions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from service.auth.tokens import Permission
from service.common.values import format_timestamp
from service.gate import service as gate_service
from service.gate.replies import GateDecision as DecisionReply
from service.gate.replies import GateDecisions
from service.gate.requests import parse_gate_request
from service.gate.store import GateDecision
from service.web.auth import current_principal, requires
from service.web.bodies import json_body
from service.web.db_session import db_session
from service.web.operations import operation
from service.web.queries import NoQuery, PageQuery, TextParam, fetch_page
from service.web.replies import reply
from service.web.request_keys import request_key

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
@operation(
    operation_id="decideGate",
    summary="Evaluate a contract against a gate policy; stored",
    reply=DecisionReply,
    reply_description="the decision with evidence",
    status=201,
    body="GateRequest",
    query=NoQuery,
    errors=(404,),
)
def decide() -> Response:
    """Evaluate a contract (or a fresh held-out set) against a policy; store the decision.

    Needs the ``gate`` permission (roles ``gate`` and ``admin``): a CI pipeline's token may ask
    the gate without being able to register or retire contracts.
    """
    NoQuery.parse()
    gate_request = parse_gate_request(json_body())
    decision = gate_service.decide_gate(
        db_session(),
        gate_request,
        actor=current_principal().name,
        request_key=request_key("decideGate"),
    )
    return reply(DecisionReply, decision_dict(decision), 201)


class DecisionsQuery(PageQuery):
    """Decisions of one model or one contract."""

    model: TextParam = None
    contract_id: TextParam = None


@bp.get("/decisions")
@requires(Permission.READ)
@operation(
    operation_id="gateDecisions",
    summary="Past gate decisions",
    reply=GateDecisions,
    reply_description="a page",
    query=DecisionsQuery,
)
def decisions() -> Response:
    """Past decisions, newest first, by model and contract; paginated."""
    query = DecisionsQuery.parse()
    page = fetch_page(
        query,
        lambda cursor, limit: gate_service.list_decisions(
            db_session(),
            model=query.model,
            contract_id=query.contract_id,
            before_seq=cursor,
            limit=limit,
        ),
        seq=lambda decision: decision.seq,
    )
    return reply(
        GateDecisions,
        {
            "decisions": [decision_dict(d) for d in page.rows],
            "next_cursor": page.next_cursor,
        },
    )
