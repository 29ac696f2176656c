"""Use cases that own their transaction: each validates, writes through storage, commits once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.auth import Role, digests_match, new_token, token_digest
from service.contract_fit import FitRequest, fit_contract_spec
from service.contracts import Contract, ContractSpec, content_sha256, hashed_document
from service.errors import Conflict, NotFound
from service.gate import GateRequest, evaluate_gate
from service.storage import audit
from service.storage import contracts as contracts_store
from service.storage import gates as gates_store
from service.storage import tokens as tokens_store
from service.storage.contracts import claim_next_version, insert_contract
from service.storage.gates import GateDecision
from service.storage.tokens import TokenInfo, insert_token, token_name_taken


def utcnow() -> datetime:
    return datetime.now(UTC)


def create_token(session: Session, *, role: Role, name: str, actor: str) -> str:
    """Create a token for ``role``, store its digest and an audit event; return the token once."""
    if token_name_taken(session, name):
        raise Conflict(f"a token named {name!r} already exists")
    token = new_token()
    now = utcnow()
    insert_token(
        session, name=name, role=role, digest=token_digest(token), created_by=actor, now=now
    )
    audit.append_event(
        session,
        type="token_created",
        actor=actor,
        now=now,
        details={"name": name, "role": role.value},
    )
    session.commit()
    return token


def revoke_token(session: Session, *, name: str, actor: str) -> TokenInfo:
    """Revoke the live token ``name`` (it stops working at once) and audit it."""
    now = utcnow()
    revoked = tokens_store.revoke_token(session, name, now)
    if revoked is None:
        raise NotFound(f"no live token named {name!r}")
    audit.append_event(
        session,
        type="token_revoked",
        actor=actor,
        now=now,
        details={"name": name, "role": revoked.role},
    )
    session.commit()
    return revoked


def register_contract(
    session: Session, spec: ContractSpec, *, actor: str, event: str = "contract_registered"
) -> Contract:
    """Store ``spec`` as the model's next version with its content hash; audit it; commit."""
    now = utcnow()
    version = claim_next_version(session, spec.model, now)
    contract_id = str(uuid.uuid4())
    digest = content_sha256(hashed_document(contract_id, version, spec, now, actor))
    contract = Contract(
        id=contract_id,
        version=version,
        spec=spec,
        created_at=now,
        created_by=actor,
        content_sha256=digest,
    )
    insert_contract(session, contract)
    audit.append_event(
        session,
        type=event,
        actor=actor,
        now=now,
        model=spec.model,
        contract_id=contract_id,
        details={"version": version, "content_sha256": digest},
    )
    session.commit()
    return contract


def fit_contract(session: Session, request: FitRequest, *, actor: str) -> Contract:
    """Fit the calibrator on the fit set, measure the baseline on both sets, and register it."""
    return register_contract(
        session, fit_contract_spec(request), actor=actor, event="contract_fitted"
    )


def find_contract(session: Session, contract_id: str) -> Contract:
    contract = contracts_store.get_contract(session, contract_id)
    if contract is None:
        raise NotFound(f"no contract with id {contract_id!r}")
    return contract


def verify_contract(session: Session, contract_id: str) -> dict[str, object]:
    """Recompute the content hash from the stored record and compare."""
    contract = find_contract(session, contract_id)
    recomputed = content_sha256(contract.hashed_document())
    return {
        "id": contract.id,
        "valid": digests_match(recomputed, contract.content_sha256),
        "content_sha256": contract.content_sha256,
        "recomputed_sha256": recomputed,
    }


def retire_contract(session: Session, contract_id: str, *, reason: str, actor: str) -> Contract:
    """Record the retirement event (the contract itself never changes); 409 if already retired."""
    contract = find_contract(session, contract_id)
    if contract.retirement is not None:
        raise Conflict(
            f"contract {contract_id} was already retired at "
            f"{contract.retirement.retired_at.isoformat()}"
        )
    now = utcnow()
    contracts_store.insert_retirement(
        session, contract_id, reason=reason, retired_by=actor, now=now
    )
    audit.append_event(
        session,
        type="contract_retired",
        actor=actor,
        now=now,
        model=contract.model,
        contract_id=contract_id,
        details={"version": contract.version, "reason": reason},
    )
    session.commit()
    return find_contract(session, contract_id)


def active_contract(session: Session, model: str, at: datetime) -> Contract:
    """The model's active contract at ``at``; 404 for an unknown model or none active."""
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    contract = contracts_store.active_contract_at(session, model, at)
    if contract is None:
        raise NotFound(f"model {model!r} has no active contract at {at.isoformat()}")
    return contract


def decide_gate(session: Session, request: GateRequest, *, actor: str) -> GateDecision:
    """Evaluate the contract against the policy, store the decision with its evidence, audit it."""
    contract = find_contract(session, request.contract_id)
    outcome = evaluate_gate(contract, request)
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
        type="gate_decided",
        actor=actor,
        now=now,
        model=contract.model,
        contract_id=contract.id,
        details={
            "decision_id": decision.id,
            "decision": decision.decision,
            "failed_checks": [c.name for c in outcome.checks if not c.passed],
            "evidence_sha256": decision.evidence_sha256,
            "policy_sha256": decision.policy_sha256,
        },
    )
    session.commit()
    return decision
