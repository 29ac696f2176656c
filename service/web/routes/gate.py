"""The deployment review gate and its stored decisions."""

from __future__ import annotations

from functools import partial

from flask import Blueprint, Response

from service.auth.tokens import Permission
from service.gate import service as gate_service
from service.gate.replies import GateDecision as DecisionReply
from service.gate.replies import GateDecisions
from service.gate.requests import GATE_REQUEST, parse_gate_request
from service.web.auth import current_principal, requires
from service.web.bodies import json_body
from service.web.db_session import db_session
from service.web.operations import operation
from service.web.queries import NoQuery, PageQuery, TextParam, fetch_newest_first
from service.web.replies import reply
from service.web.request_keys import request_key

bp = Blueprint("gate", __name__, url_prefix="/v1/gate")


@bp.post("")
@requires(Permission.GATE)
@operation(
    operation_id="decideGate",
    reply=DecisionReply,
    reply_description="the decision with evidence",
    status=201,
    body=GATE_REQUEST,
    query=NoQuery,
    errors=(404,),
)
def decide() -> Response:
    """Evaluate a contract against a gate policy; stored.

    Evaluate a contract (or a fresh held-out set) against a policy; store the decision.

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
    return reply(DecisionReply, decision, 201)


class DecisionsQuery(PageQuery):
    """Decisions of one model or one contract."""

    model: TextParam = None
    contract_id: TextParam = None


@bp.get("/decisions")
@requires(Permission.READ)
@operation(
    operation_id="gateDecisions",
    reply=GateDecisions,
    reply_description="a page",
    query=DecisionsQuery,
)
def decisions() -> Response:
    """Past gate decisions.

    Past decisions, newest first, by model and contract; paginated.
    """
    query = DecisionsQuery.parse()
    page = fetch_newest_first(
        query, partial(gate_service.list_decisions, db_session()), seq=lambda row: row.seq
    )
    return reply(GateDecisions, {"decisions": page.rows, "next_cursor": page.next_cursor})
