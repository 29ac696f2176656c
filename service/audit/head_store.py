"""The stored keyed head of the audit log (its rules are in ``service.audit.head``)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.audit.head import KeyedHead
from service.db.models import AuditHeadRecord

#: The head is one row.
_ROW = 1


def read_head(session: Session) -> KeyedHead | None:
    """The stored keyed head, or None when there is none."""
    row = session.get(AuditHeadRecord, _ROW, populate_existing=True)
    if row is None:
        return None
    return KeyedHead(row.events, row.seq, row.sha256, row.key_id, row.mac)


def write_head(session: Session, head: KeyedHead) -> None:
    """Store ``head`` in place of the previous one (in the caller's transaction)."""
    row = session.get(AuditHeadRecord, _ROW)
    if row is None:
        row = AuditHeadRecord(id=_ROW)
        session.add(row)
    row.events, row.seq, row.sha256 = head.events, head.seq, head.sha256
    row.key_id, row.mac = head.key_id, head.mac
    session.flush()
