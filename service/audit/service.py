"""Use cases of the audit log: verify the chain, report its head."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.audit import store as audit
from service.audit.chain import Anchor
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


#: A read that needs nothing but its query is the store's function itself.
list_events = audit.list_events
