"""The audit log's verification as a result: a section per check and the problems found
(``service.audit.service.verify_audit`` builds it; ``service.audit.replies.ChainVerification``
is its reply and what ``calmon audit verify`` prints)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ChainCheck:
    """The hash chain: valid, or the first event that does not fit (``first_invalid_seq``) and
    why; the hashing scheme of its head (``sha256`` or ``hmac-sha256``) and where its keyed
    segment begins, under which key."""

    valid: bool
    first_invalid_seq: int | None
    reason: str | None
    scheme: str
    keyed_from_seq: int | None
    key_id: str | None


@dataclass(frozen=True)
class ChainEnd:
    """The last event of the chain."""

    seq: int
    sha256: str
    ts: datetime


@dataclass(frozen=True)
class AnchorCheck:
    """An anchor (a head kept outside the database) checked against the chain."""

    seq: int
    sha256: str
    valid: bool
    reason: str | None


@dataclass(frozen=True)
class KeyedHeadCheck:
    """The keyed head (None in each of its fields when there is none) checked against the
    chain."""

    events: int | None
    seq: int | None
    sha256: str | None
    key_id: str | None
    valid: bool
    reason: str | None


@dataclass(frozen=True)
class RecordsCheck:
    """One kind of record checked against its events: the rows read and their problems."""

    valid: bool
    checked: int
    problem_count: int


@dataclass(frozen=True)
class CheckedRows:
    """How many rows of each kind the verification read."""

    events: int
    contracts: int
    decisions: int
    retirements: int


@dataclass(frozen=True)
class AuditVerification:
    """The audit log's verification: ``valid`` when every check holds; the first
    ``LISTED_PROBLEMS`` problems (each naming its ``check``, its row and the ``seq`` of its
    event) with their total. ``anchor`` is None without an anchor, ``keyed_head`` without a
    key, ``head`` on an empty chain."""

    valid: bool
    checked: CheckedRows
    events: int
    head: ChainEnd | None
    chain: ChainCheck
    anchor: AnchorCheck | None
    keyed_head: KeyedHeadCheck | None
    contracts: RecordsCheck
    decisions: RecordsCheck
    retirements: RecordsCheck
    problem_count: int
    problems: list[dict[str, Any]]

    @property
    def first_invalid_seq(self) -> int | None:
        """The ``seq`` of the first problem's event (None when that event is missing); an
        ``AttributeError`` on a valid log, which has no such field."""
        return self._first_problem()["seq"]  # type: ignore[no-any-return]

    @property
    def reason(self) -> str:
        """The first problem as a line of text naming its row; an ``AttributeError`` on a
        valid log, which has no such field."""
        return problem_text(self._first_problem())

    def _first_problem(self) -> dict[str, Any]:
        if not self.problems:
            raise AttributeError("a log that verifies has no first problem")
        return self.problems[0]


def problem_text(problem: dict[str, Any]) -> str:
    """One problem as a line of text that names its row."""
    check, text = problem["check"], str(problem["problem"])
    if check == "contract":
        return f"contract {problem['contract_id']}: {text}"
    if check == "decision":
        return f"gate decision {problem['decision_id']}: {text}"
    if check == "retirement":
        return f"retirement of contract {problem['contract_id']}: {text}"
    return text
