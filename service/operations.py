"""Use cases that own their transaction: each validates, writes through storage, commits once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from service.audit import Anchor, retirement_document, retirement_sha256
from service.auth import (
    BOOTSTRAP_ADMIN_NAME,
    SESSION_LIFETIME,
    Permission,
    Principal,
    Role,
    digests_match,
    new_session_id,
    new_token,
    session_binding,
    session_digest,
    token_digest,
)
from service.contract_fit import FitRequest, fit_contract_spec
from service.contracts import Contract, ContractSpec, content_sha256, hashed_document
from service.errors import Conflict, NotFound
from service.gate import BaselineSource, GateRequest, evaluate_gate
from service.storage import audit
from service.storage import contracts as contracts_store
from service.storage import gates as gates_store
from service.storage import sessions as sessions_store
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
    token_id, info = revoked
    ended = sessions_store.delete_token_sessions(session, token_id)
    audit.append_event(
        session,
        type="token_revoked",
        actor=actor,
        now=now,
        details={"name": name, "role": info.role, "sessions_ended": ended},
    )
    session.commit()
    return info


def _token_holder(
    session: Session, digest: str, bootstrap_token: str | None
) -> tuple[int | None, Principal] | None:
    """The token row id (None for the bootstrap admin) and holder of a live token's digest."""
    if bootstrap_token and digests_match(digest, token_digest(bootstrap_token)):
        return None, Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN)
    live = tokens_store.live_token(session, digest=digest)
    return None if live is None else (live.id, live.principal)


def resolve_token(session: Session, token: str, *, bootstrap_token: str | None) -> Principal | None:
    """The principal a bearer token stands for: the bootstrap admin or a live stored token."""
    holder = _token_holder(session, token_digest(token), bootstrap_token)
    return None if holder is None else holder[1]


def open_ui_session(
    session: Session, token: str, *, bootstrap_token: str | None
) -> tuple[str, Principal] | None:
    """Sign in to the review pages with a token that may read: store a new session (its id
    hashed, bound to the token) and return the id, for the cookie, with the principal.

    Sessions last ``SESSION_LIFETIME`` from sign-in; expired ones are purged here.
    """
    digest = token_digest(token)
    holder = _token_holder(session, digest, bootstrap_token)
    if holder is None or not holder[1].may(Permission.READ):
        return None
    token_id, principal = holder
    session_id = new_session_id()
    now = utcnow()
    sessions_store.delete_expired(session, now)
    sessions_store.insert_session(
        session,
        id_sha256=session_digest(session_id),
        token_id=token_id,
        token_binding=session_binding(session_id, digest),
        principal=principal.name,
        role=principal.role.value,
        now=now,
        expires_at=now + SESSION_LIFETIME,
    )
    session.commit()
    return session_id, principal


def ui_session_principal(
    session: Session, session_id: str, *, bootstrap_token: str | None
) -> Principal | None:
    """The principal of a live review-page session: None once it expired, was signed out, or
    its token was revoked (or the bootstrap token changed)."""
    stored = sessions_store.live_session(session, session_digest(session_id), utcnow())
    if stored is None:
        return None
    if stored.token_id is None:
        if not bootstrap_token:
            return None
        digest, principal = (
            token_digest(bootstrap_token),
            Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN),
        )
    else:
        live = tokens_store.live_token(session, token_id=stored.token_id)
        if live is None:
            return None
        digest, principal = live.digest, live.principal
    if not digests_match(stored.token_binding, session_binding(session_id, digest)):
        return None
    return principal


def close_ui_session(session: Session, session_id: str) -> None:
    """Sign out: delete the session."""
    sessions_store.delete_session(session, session_digest(session_id))
    session.commit()


def register_contract(
    session: Session, spec: ContractSpec, *, actor: str, event: str = "contract_registered"
) -> Contract:
    """Store ``spec`` as the model's next version with its content hash; audit it; commit.

    The event's type records where the baseline came from: ``contract_fitted`` when calmon
    measured it (``fit_contract``), ``contract_registered`` when the registrant supplied it.
    """
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
        details={
            "version": version,
            "content_sha256": digest,
            "baseline_source": "measured" if event == "contract_fitted" else "supplied",
        },
    )
    session.commit()
    return contract


def fit_contract(session: Session, request: FitRequest, *, actor: str) -> Contract:
    """Fit the calibrator on the fit set, measure the baseline on both sets, and register it."""
    return register_contract(
        session, fit_contract_spec(request), actor=actor, event="contract_fitted"
    )


def baseline_source(session: Session, contract: Contract) -> BaselineSource:
    """``measured`` if the audit chain records calmon fitting the contract, else ``supplied``
    (registered with its baseline, or no creation event to vouch for it)."""
    kind = audit.creation_event_type(session, contract.model, contract.id)
    return "measured" if kind == "contract_fitted" else "supplied"


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


def verify_audit(session: Session, anchor: Anchor | None = None) -> dict[str, Any]:
    """Verify the audit chain (under the session's keys), the anchor, and every retirement."""
    return audit.verify_chain(session, anchor)


def audit_head(session: Session) -> dict[str, Any] | None:
    """The head of a chain that verifies, for an operator to keep outside the database; raise
    ``Conflict`` with the reason when the chain does not verify (an anchor of a broken chain
    would vouch for the tampering)."""
    report = verify_audit(session)
    if not report["valid"]:
        raise Conflict(f"the audit chain does not verify: {report['reason']}")
    head: dict[str, Any] | None = report["head"]
    return head


def retire_contract(session: Session, contract_id: str, *, reason: str, actor: str) -> Contract:
    """Record the retirement event (the contract itself never changes); 409 if already retired."""
    contract = find_contract(session, contract_id)
    if contract.retirement is not None:
        raise Conflict(
            f"contract {contract_id} was already retired at "
            f"{contract.retirement.retired_at.isoformat()}"
        )
    now = utcnow()
    row = contracts_store.insert_retirement(
        session, contract_id, reason=reason, retired_by=actor, now=now
    )
    retirement = retirement_document(row.contract_id, row.reason, row.retired_at, row.retired_by)
    audit.append_event(
        session,
        type="contract_retired",
        actor=actor,
        now=now,
        model=contract.model,
        contract_id=contract_id,
        details={
            "version": contract.version,
            "reason": reason,
            "retirement": retirement,
            "retirement_sha256": retirement_sha256(retirement),
        },
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
    outcome = evaluate_gate(contract, request, baseline_source(session, contract))
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
