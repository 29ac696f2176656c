"""The replies of the audit routes: a page of the log and the log's verification."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import MISSING, Field

from service.audit.records import LISTED_PROBLEMS
from service.common.replies import Count, Reply, Sha256, Timestamp, documented


class AuditEvent(Reply):
    """One event of the chain: ``sha256`` covers the event and ``prev_sha256``."""

    seq: int
    ts: Timestamp
    type: str
    actor: str
    model: str | None
    contract_id: str | None
    details: Annotated[Any, documented({"type": "object", "description": "what the event records"})]
    prev_sha256: str
    sha256: str


class AuditEvents(Reply):
    """A page of the log, oldest first; ``next_cursor`` is null on the last page."""

    events: list[AuditEvent]
    next_cursor: str | None


class Problem(Reply):
    """One thing a verification found: the check, the row it concerns, the ``seq`` of its event
    (null when the event is missing) and what differs."""

    check: Literal["chain", "anchor", "keyed_head", "contract", "decision", "retirement"]
    seq: int | None
    problem: str
    contract_id: str | MISSING | None = MISSING
    decision_id: str | MISSING = MISSING
    model: str | MISSING | None = MISSING
    version: int | MISSING | None = MISSING
    differences: dict[str, dict[str, Any]] | MISSING = MISSING


class ChainHead(Reply):
    """The last event of the chain."""

    seq: Count
    sha256: Sha256
    ts: Timestamp


class ChainReport(Reply):
    """The hash chain: valid, or the first event that breaks it and why."""

    valid: bool
    first_invalid_seq: int | None
    reason: str | None
    scheme: Literal["sha256", "hmac-sha256"]
    keyed_from_seq: int | None
    key_id: str | None


class AnchorReport(Reply):
    """The anchor (``expected_seq``, ``expected_sha256``) checked against the chain."""

    seq: int
    sha256: str
    valid: bool
    reason: str | None


class KeyedHeadReport(Reply):
    """The keyed head (the log's end signed with the audit key) checked against the chain."""

    events: int | None
    seq: int | None
    sha256: str | None
    key_id: str | None
    valid: bool
    reason: str | None


class PartCheck(Reply):
    """One kind of record checked against its events."""

    valid: bool
    checked: Count
    problem_count: Count


class Checked(Reply):
    """How many rows of each kind the verification read."""

    events: Count
    contracts: Count
    decisions: Count
    retirements: Count


class ChainVerification(Reply):
    """The audit log's verification: ``valid`` when every check holds; the first problems
    listed (at most the listed cap) with their total."""

    valid: bool
    checked: Checked
    events: Count
    head: ChainHead | None
    chain: ChainReport
    anchor: AnchorReport | None
    keyed_head: KeyedHeadReport | None
    contracts: PartCheck
    decisions: PartCheck
    retirements: PartCheck
    problem_count: Count
    problems: Annotated[list[Problem], Field(max_length=LISTED_PROBLEMS)]
    first_invalid_seq: int | MISSING | None = MISSING
    reason: str | MISSING = MISSING
