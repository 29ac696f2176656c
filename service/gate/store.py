"""Stored gate decisions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import GateDecisionRecord


@dataclass(frozen=True)
class GateDecision:
    seq: int
    id: str
    contract_id: str
    model: str
    decided_at: datetime
    decided_by: str
    decision: str
    policy: dict[str, Any]
    checks: list[Any]
    evidence: dict[str, Any]
    policy_sha256: str
    evidence_sha256: str


def insert_decision(session: Session, decision: GateDecision) -> None:
    session.add(
        GateDecisionRecord(
            id=decision.id,
            contract_id=decision.contract_id,
            model=decision.model,
            decided_at=decision.decided_at,
            decided_by=decision.decided_by,
            decision=decision.decision,
            policy=decision.policy,
            checks=decision.checks,
            evidence=decision.evidence,
            policy_sha256=decision.policy_sha256,
            evidence_sha256=decision.evidence_sha256,
        )
    )
    session.flush()


def list_decisions(
    session: Session,
    *,
    model: str | None = None,
    contract_id: str | None = None,
    before_seq: int | None = None,
    limit: int = 50,
) -> list[GateDecision]:
    """Decisions newest first, filtered by model and contract; ``before_seq`` continues a page."""
    query = select(GateDecisionRecord).order_by(GateDecisionRecord.seq.desc()).limit(limit)
    if model is not None:
        query = query.where(GateDecisionRecord.model == model)
    if contract_id is not None:
        query = query.where(GateDecisionRecord.contract_id == contract_id)
    if before_seq is not None:
        query = query.where(GateDecisionRecord.seq < before_seq)
    return [_to_decision(r) for r in session.scalars(query)]


def find_decision(session: Session, decision_id: str) -> GateDecision | None:
    """The decision with id ``decision_id``, or None."""
    row = session.scalars(
        select(GateDecisionRecord).where(GateDecisionRecord.id == decision_id)
    ).one_or_none()
    return None if row is None else _to_decision(row)


def _to_decision(r: GateDecisionRecord) -> GateDecision:
    return GateDecision(
        r.seq,
        r.id,
        r.contract_id,
        r.model,
        r.decided_at,
        r.decided_by,
        r.decision,
        dict(r.policy),
        list(r.checks),
        dict(r.evidence),
        r.policy_sha256,
        r.evidence_sha256,
    )
