"""Read-only lookups of single audit events by what their details say (portable JSON paths).

``status_since`` answers "since when is this slice in its status": the time of the newest
``drift_status_changed`` event into that status (the refresher writes one per transition, with
``cohort``, ``window``, ``from`` and ``to`` in its details). ``decision_event`` finds the
``gate_decided`` event that recorded a gate decision (``decision_id`` in its details).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.audit.events import GateDecided, StatusChanged
from service.audit.store import AuditEvent, list_events
from service.db.models import AuditEventRecord

DRIFT_STATUS_CHANGED = StatusChanged.TYPE
GATE_DECIDED = GateDecided.TYPE


def status_since(
    session: Session, model: str, cohort: str, window: str, status: str
) -> datetime | None:
    """When the slice's status last changed into ``status`` (UTC), or None when the chain holds
    no such transition (the status has held since the slice's first stored reading)."""
    details = AuditEventRecord.details
    return session.scalar(
        select(AuditEventRecord.ts)
        .where(
            AuditEventRecord.model == model,
            AuditEventRecord.type == DRIFT_STATUS_CHANGED,
            details["cohort"].as_string() == cohort,
            details["window"].as_string() == window,
            details["to"].as_string() == status,
        )
        .order_by(AuditEventRecord.seq.desc())
        .limit(1)
    )


def decision_event(session: Session, decision_id: str) -> AuditEvent | None:
    """The ``gate_decided`` event recording decision ``decision_id``, if the chain holds it."""
    seq = session.scalar(
        select(AuditEventRecord.seq)
        .where(
            AuditEventRecord.type == GATE_DECIDED,
            AuditEventRecord.details["decision_id"].as_string() == decision_id,
        )
        .order_by(AuditEventRecord.seq)
        .limit(1)
    )
    if seq is None:
        return None
    found = list_events(session, after_seq=seq - 1, limit=1)
    return found[0] if found else None
