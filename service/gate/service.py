"""The gate's use case: decide, store the decision with its evidence, audit it."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from service.audit import request_keys
from service.audit import store as audit
from service.audit.events import GateDecided
from service.audit.request_keys import RequestKey
from service.common.clock import utcnow
from service.contracts.service import baseline_source, find_contract
from service.gate import store as gates_store
from service.gate.checks import evaluate_gate
from service.gate.live import live_slices
from service.gate.requests import GateRequest
from service.gate.store import GateDecision


def decide_gate(
    session: Session,
    request: GateRequest,
    *,
    actor: str,
    request_key: RequestKey | None = None,
) -> GateDecision:
    """Evaluate the contract against the policy, store the decision with its evidence, audit it.

    A request whose ``request_key`` was decided before gets that decision back, unchanged
    (committed, so that on PostgreSQL the reply waits until the decision is on the standby)."""
    prior = request_keys.prior_result(session, request_key)
    if prior is not None:
        stored = gates_store.find_decision(session, prior)
        if stored is not None:
            session.commit()
            return stored
    contract = find_contract(session, request.contract_id)
    live = live_slices(session, contract.model) if request.policy.get("max_live_status") else ()
    outcome = evaluate_gate(contract, request, baseline_source(session, contract), live)
    now = utcnow()
    decision = GateDecision(
        seq=0,
        id=str(uuid.uuid4()),
        contract_id=contract.id,
        model=contract.model,
        decided_at=now,
        decided_by=actor,
        decision=outcome.decision,
        policy=outcome.policy,
        checks=[c.to_dict() for c in outcome.checks],
        evidence=outcome.evidence,
        policy_sha256=outcome.policy_sha256,
        evidence_sha256=outcome.evidence_sha256,
    )
    gates_store.insert_decision(session, decision)
    audit.append_event(
        session,
        GateDecided(
            decision_id=decision.id,
            decision=decision.decision,
            failed_checks=[c.name for c in outcome.checks if not c.passed],
            evidence_sha256=decision.evidence_sha256,
            policy_sha256=decision.policy_sha256,
        ),
        actor=actor,
        now=now,
        model=contract.model,
        contract_id=contract.id,
    )
    request_keys.remember(session, request_key, decision.id, now)
    session.commit()
    return decision


#: A read that needs nothing but its query is the store's function itself.
list_decisions = gates_store.list_decisions
