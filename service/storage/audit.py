"""The append-only audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.storage.models import AuditEventRecord


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    ts: datetime
    type: str
    actor: str
    model: str | None
    contract_id: str | None
    details: dict[str, Any]


def append_event(
    session: Session,
    *,
    type: str,
    actor: str,
    now: datetime,
    model: str | None = None,
    contract_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one event (in the caller's transaction)."""
    session.add(
        AuditEventRecord(
            ts=now,
            type=type,
            actor=actor,
            model=model,
            contract_id=contract_id,
            details=details or {},
        )
    )
    session.flush()


def list_events(
    session: Session,
    *,
    model: str | None = None,
    type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after_seq: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Events in append order (oldest first), filtered; ``after_seq`` continues a page."""
    query = select(AuditEventRecord).order_by(AuditEventRecord.seq).limit(limit)
    if model is not None:
        query = query.where(AuditEventRecord.model == model)
    if type is not None:
        query = query.where(AuditEventRecord.type == type)
    if since is not None:
        query = query.where(AuditEventRecord.ts >= since)
    if until is not None:
        query = query.where(AuditEventRecord.ts < until)
    if after_seq is not None:
        query = query.where(AuditEventRecord.seq > after_seq)
    return [
        AuditEvent(r.seq, r.ts, r.type, r.actor, r.model, r.contract_id, dict(r.details))
        for r in session.scalars(query)
    ]
