"""Use cases of the audit log: verify the chain, report its head."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from service.audit import store as audit
from service.audit.chain import Anchor
from service.audit.store import AuditEvent
from service.common.errors import Conflict


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
    """Events oldest first (or newest first), filtered; ``after_seq`` continues a page."""
    return audit.list_events(
        session,
        model=model,
        type=type,
        since=since,
        until=until,
        after_seq=after_seq,
        limit=limit,
        newest_first=newest_first,
    )
