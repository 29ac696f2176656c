"""The rows the audit log vouches for, read for verification: gate decisions and retirements.

Rows are read as plain column tuples a page at a time, so a long history of decisions with
their evidence never sits in the session at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import RowMapping, select
from sqlalchemy.orm import Session

from service.audit.chain import RetirementRow
from service.audit.records import StoredDecision
from service.common.hashing import sha256_of
from service.db.models import ContractRetirement, GateDecisionRecord, table_of
from service.db.paging import rows_by_seq


def _digest(document: Any) -> str | None:
    """SHA-256 of a stored document's canonical JSON; None if it cannot be hashed (a value
    written by hand that canonical JSON refuses, such as NaN)."""
    try:
        return sha256_of(document)
    except (TypeError, ValueError):
        return None


def _failed_checks(checks: Any) -> tuple[str, ...] | None:
    """The names of the checks that did not pass, in stored order; None if the stored checks
    are not a list of ``{"name", "passed"}`` objects."""
    if not isinstance(checks, list):
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in checks):
        return None
    return tuple(c["name"] for c in checks if not c.get("passed"))


def _stored_decision(row: RowMapping) -> StoredDecision:
    return StoredDecision(
        seq=row["seq"],
        id=row["id"],
        contract_id=row["contract_id"],
        model=row["model"],
        decided_at=row["decided_at"],
        decided_by=row["decided_by"],
        decision=row["decision"],
        policy_sha256=row["policy_sha256"],
        evidence_sha256=row["evidence_sha256"],
        policy_sha256_recomputed=_digest(row["policy"]),
        evidence_sha256_recomputed=_digest(row["evidence"]),
        failed_checks=_failed_checks(row["checks"]),
    )


def stored_decisions(session: Session, page: int = 200) -> Iterator[StoredDecision]:
    """Every stored gate decision in the order stored, read ``page`` rows at a time."""
    for row in rows_by_seq(session, table_of(GateDecisionRecord), page):
        yield _stored_decision(row)


def list_retirements(session: Session) -> list[RetirementRow]:
    """Every retirement row (there is at most one per contract)."""
    rows = session.scalars(select(ContractRetirement).order_by(ContractRetirement.contract_id))
    return [RetirementRow(r.contract_id, r.reason, r.retired_at, r.retired_by) for r in rows]
