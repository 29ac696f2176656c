"""Read-only use cases of stored gate decisions: one decision with the audit event that
recorded it, and each model's latest decision.

A decision ties to the audit log three ways: its ``policy_sha256`` and ``evidence_sha256`` are
the SHA-256 of the canonical JSON of its stored policy and evidence (recomputed here), and the
``gate_decided`` event that recorded it carries the decision id and both digests in its details,
at its place (``seq``, ``sha256``) on the hash chain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.audit.events import GateDecided
from service.audit.lookups import decision_event
from service.audit.store import AuditEvent
from service.common.errors import NotFound
from service.common.hashing import digests_match, sha256_of
from service.db.models import GateDecisionRecord
from service.gate.store import GateDecision, list_decisions


@dataclass(frozen=True)
class DecisionRecord:
    """A stored decision, the event that recorded it (None if the chain lacks it) and whether
    each stored digest equals the one recomputed from the stored document and the event's."""

    decision: GateDecision
    event: AuditEvent | None
    policy_sha256_recomputed: str
    evidence_sha256_recomputed: str

    @property
    def policy_digest_matches(self) -> bool:
        return digests_match(self.policy_sha256_recomputed, self.decision.policy_sha256)

    @property
    def evidence_digest_matches(self) -> bool:
        return digests_match(self.evidence_sha256_recomputed, self.decision.evidence_sha256)

    @property
    def event_matches(self) -> bool:
        """The event names this decision, its outcome and both of its digests."""
        if self.event is None:
            return False
        recorded, d = GateDecided.read(self.event.details), self.decision
        return (
            recorded.decision_id == d.id
            and recorded.decision == d.decision
            and recorded.policy_sha256 == d.policy_sha256
            and recorded.evidence_sha256 == d.evidence_sha256
        )


def find_decision(session: Session, decision_id: str) -> GateDecision:
    """One stored decision; ``NotFound`` for an unknown id."""
    seq = session.scalar(select(GateDecisionRecord.seq).where(GateDecisionRecord.id == decision_id))
    found = [] if seq is None else list_decisions(session, before_seq=seq + 1, limit=1)
    if not found or found[0].id != decision_id:
        raise NotFound(f"no gate decision with id {decision_id!r}")
    return found[0]


def decision_record(session: Session, decision_id: str) -> DecisionRecord:
    """The decision with its audit event and recomputed digests; ``NotFound`` if unknown."""
    decision = find_decision(session, decision_id)
    return DecisionRecord(
        decision=decision,
        event=decision_event(session, decision.id),
        policy_sha256_recomputed=sha256_of(decision.policy),
        evidence_sha256_recomputed=sha256_of(decision.evidence),
    )


def latest_decisions(session: Session, models: Iterable[str]) -> dict[str, GateDecision]:
    """Each model's newest decision (models without one are absent)."""
    out = {}
    for model in models:
        newest = list_decisions(session, model=model, limit=1)
        if newest:
            out[model] = newest[0]
    return out
