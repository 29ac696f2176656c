"""The append-only, hash-chained audit log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from service.audit import GENESIS, event_digest
from service.storage.models import AuditEventRecord

#: Key of the PostgreSQL advisory lock that serialises appends (so each sees its predecessor).
_APPEND_LOCK = 0x63616C6D6F6E


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    ts: datetime
    type: str
    actor: str
    model: str | None
    contract_id: str | None
    details: dict[str, Any]
    prev_sha256: str
    sha256: str


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
    """Append one event, chained to the last one (in the caller's transaction).

    On PostgreSQL a transaction-scoped advisory lock orders concurrent appends; SQLite's write
    transactions are serialised already.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _APPEND_LOCK})
    prev = (
        session.scalar(
            select(AuditEventRecord.sha256).order_by(AuditEventRecord.seq.desc()).limit(1)
        )
        or GENESIS
    )
    details = details or {}
    digest = event_digest(
        prev, ts=now, type=type, actor=actor, model=model, contract_id=contract_id, details=details
    )
    session.add(
        AuditEventRecord(
            ts=now,
            type=type,
            actor=actor,
            model=model,
            contract_id=contract_id,
            details=details,
            prev_sha256=prev,
            sha256=digest,
        )
    )
    session.flush()


def _to_event(r: AuditEventRecord) -> AuditEvent:
    return AuditEvent(
        r.seq,
        r.ts,
        r.type,
        r.actor,
        r.model,
        r.contract_id,
        dict(r.details),
        r.prev_sha256,
        r.sha256,
    )


def list_events(
    session: Session,
    *,
    model: str | None = None,
    type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after_seq: int | None = None,
    limit: int = 100,
    newest_first: bool = False,
) -> list[AuditEvent]:
    """Events in append order (oldest first, or newest first), filtered; ``after_seq``
    continues an oldest-first page."""
    order = AuditEventRecord.seq.desc() if newest_first else AuditEventRecord.seq
    query = select(AuditEventRecord).order_by(order).limit(limit)
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
    return [_to_event(r) for r in session.scalars(query)]


def iter_chain(session: Session, page: int = 1000) -> Iterator[AuditEvent]:
    """Every event in append order, read in pages."""
    after = 0
    while True:
        rows = list(
            session.scalars(
                select(AuditEventRecord)
                .where(AuditEventRecord.seq > after)
                .order_by(AuditEventRecord.seq)
                .limit(page)
            )
        )
        if not rows:
            return
        for row in rows:
            yield _to_event(row)
        after = rows[-1].seq


def verify_chain(session: Session) -> dict[str, Any]:
    """Walk the chain: every event must hash to its ``sha256`` and link to its predecessor."""
    prev = GENESIS
    count = 0
    for event in iter_chain(session):
        expected = event_digest(
            prev,
            ts=event.ts,
            type=event.type,
            actor=event.actor,
            model=event.model,
            contract_id=event.contract_id,
            details=event.details,
        )
        if event.prev_sha256 != prev or event.sha256 != expected:
            return {
                "valid": False,
                "events": count,
                "first_invalid_seq": event.seq,
                "reason": "the event does not link to its predecessor"
                if event.prev_sha256 != prev
                else "the event's content does not match its hash",
            }
        prev = event.sha256
        count += 1
    return {"valid": True, "events": count, "head_sha256": prev}
