"""The records the audit log vouches for, checked against the events that recorded them. No SQL.

Three kinds of rows are written in one transaction with an audit event that describes them:

- a **contract** with ``contract_registered`` or ``contract_fitted``: the event's ``model``,
  ``contract_id``, time and actor, and in its details the ``version`` and ``content_sha256``.
  The contract's hash is recomputed from its stored fields; it must equal the hash the event
  recorded (and so must the stored ``content_sha256``), so rewriting a contract and its
  ``content_sha256`` together is still seen.
- a **gate decision** with ``gate_decided``: the event's ``model``, ``contract_id``, time and
  actor, and in its details the ``decision_id``, the ``decision`` (pass or fail), the
  ``failed_checks`` by name and the ``policy_sha256`` and ``evidence_sha256``. The stored
  policy and evidence are hashed again; both digests, and the stored digest columns, must equal
  the event's.
- a **retirement** with ``contract_retired``: the row's fields and their SHA-256 (events
  written before those fields were added carry the reason only, and their row is checked
  against the event's time, actor and reason).

A row without its event, an event without its row, a second event for one row, and any
difference is a problem, named by the row's id with the fields that differ.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from service.audit.chain import (
    RETIRED,
    ChainEvent,
    RetirementRow,
    retirement_document,
    retirement_sha256,
)
from service.audit.events import CREATION_EVENTS, ContractCreated, ContractRetired, GateDecided
from service.common.values import format_timestamp

CONTRACT_CREATED = tuple(CREATION_EVENTS)
GATE_DECIDED = GateDecided.TYPE
#: Problems listed in a report; the rest are counted.
LISTED_PROBLEMS = 100


@dataclass(frozen=True)
class StoredContract:
    """A stored contract as verification sees it: its identity, its stored ``content_sha256``,
    and the hash recomputed from its stored fields (None, with ``unreadable`` saying why, when
    the fields cannot be read back)."""

    seq: int
    id: str
    model: str
    version: int
    created_at: datetime
    created_by: str
    content_sha256: str
    recomputed_sha256: str | None
    unreadable: str | None = None


@dataclass(frozen=True)
class StoredDecision:
    """A stored gate decision as verification sees it: its columns, the SHA-256 recomputed
    from its stored policy and evidence (None if they cannot be hashed), and the names of its
    failed checks (None if its checks cannot be read)."""

    seq: int
    id: str
    contract_id: str
    model: str
    decided_at: datetime
    decided_by: str
    decision: str
    policy_sha256: str
    evidence_sha256: str
    policy_sha256_recomputed: str | None
    evidence_sha256_recomputed: str | None
    failed_checks: tuple[str, ...] | None


@dataclass(frozen=True)
class _Recorded:
    """What one event recorded of its row: the comparable values it holds, by field name."""

    seq: int
    type: str
    values: dict[str, Any]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return hmac.compare_digest(a.encode(), b.encode())
    return bool(a == b)


def _shown(value: Any) -> Any:
    return format_timestamp(value) if isinstance(value, datetime) else value


def _differences(row: dict[str, Any], recorded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{field: {"row": ..., "event": ...}}`` for every field the event holds that differs."""
    return {
        name: {"row": _shown(row[name]), "event": _shown(value)}
        for name, value in recorded.items()
        if name in row and not _same(row[name], value)
    }


def contract_recorded(event: ChainEvent) -> _Recorded:
    payload = ContractCreated.read(event.details)
    values: dict[str, Any] = {
        "model": event.model,
        "created_at": event.ts,
        "created_by": event.actor,
    }
    for name, value in (("version", payload.version), ("content_sha256", payload.content_sha256)):
        if value is not None:
            values[name] = value
    return _Recorded(event.seq, event.type, values)


def _decision_recorded(event: ChainEvent, payload: GateDecided) -> _Recorded:
    values: dict[str, Any] = {
        "contract_id": event.contract_id,
        "model": event.model,
        "decided_at": event.ts,
        "decided_by": event.actor,
    }
    for name, value in (
        ("decision", payload.decision),
        ("policy_sha256", payload.policy_sha256),
        ("evidence_sha256", payload.evidence_sha256),
    ):
        if value is not None:
            values[name] = value
    if isinstance(payload.failed_checks, list):
        values["failed_checks"] = tuple(payload.failed_checks)
    return _Recorded(event.seq, event.type, values)


def _contract_row(row: StoredContract, recorded: dict[str, Any]) -> dict[str, Any]:
    """The row's values under the names the event uses; ``content`` is the recomputed hash,
    compared with the hash the event recorded."""
    values: dict[str, Any] = {
        "model": row.model,
        "version": row.version,
        "created_at": row.created_at,
        "created_by": row.created_by,
        "content_sha256": row.content_sha256,
    }
    if "content_sha256" in recorded:
        values["content"] = row.recomputed_sha256
    return values


def _decision_row(row: StoredDecision) -> dict[str, Any]:
    """The row's values under the names the event uses; ``policy`` and ``evidence`` are the
    digests recomputed from the stored documents."""
    return {
        "contract_id": row.contract_id,
        "model": row.model,
        "decided_at": row.decided_at,
        "decided_by": row.decided_by,
        "decision": row.decision,
        "policy_sha256": row.policy_sha256,
        "evidence_sha256": row.evidence_sha256,
        "policy": row.policy_sha256_recomputed,
        "evidence": row.evidence_sha256_recomputed,
        "failed_checks": row.failed_checks,
    }


def _with_recomputed(values: dict[str, Any], pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The recorded values plus, for each ``(recomputed, recorded)`` pair, the recorded digest
    under the recomputed field's name (the document must hash to what the event recorded)."""
    out = dict(values)
    for recomputed, recorded in pairs:
        if recorded in values:
            out[recomputed] = values[recorded]
    return out


def contract_problem(recorded: _Recorded | None, row: StoredContract) -> dict[str, Any] | None:
    """The problem of one stored contract against the event that recorded it, or None."""
    identity = {
        "check": "contract",
        "contract_id": row.id,
        "model": row.model,
        "version": row.version,
    }
    if recorded is None:
        return {
            **identity,
            "seq": None,
            "problem": "the contract has no contract_registered or contract_fitted event: it "
            "was added outside calmon, or its event was deleted",
        }
    expected = _with_recomputed(recorded.values, [("content", "content_sha256")])
    differences = _differences(_contract_row(row, recorded.values), expected)
    if not differences:
        return None
    problem = (
        f"the contract differs from its {recorded.type} event: {', '.join(differences)}"
        if row.unreadable is None
        else f"the contract cannot be read back to recompute its hash ({row.unreadable})"
    )
    if "content" in differences and row.unreadable is None:
        if "content_sha256" in differences:
            problem += " (its fields and its content_sha256 were rewritten together)"
        else:
            problem += " (its fields were changed; its content_sha256 still matches the event)"
    return {**identity, "seq": recorded.seq, "problem": problem, "differences": differences}


def contract_problems(events: Sequence[ChainEvent], row: StoredContract) -> list[dict[str, Any]]:
    """Every problem of one contract against the events that recorded its creation (oldest
    first): its differences from the first, each further one, and, when there is none, whether
    its fields still hash to its stored ``content_sha256``."""
    identity = {"check": "contract", "contract_id": row.id, "model": row.model}
    recorded = contract_recorded(events[0]) if events else None
    first = contract_problem(recorded, row)
    problems = [] if first is None else [first]
    if recorded is None and (
        row.recomputed_sha256 is None or not _same(row.recomputed_sha256, row.content_sha256)
    ):
        problems.append(
            {
                **identity,
                "version": row.version,
                "seq": None,
                "problem": "the contract's fields do not hash to its content_sha256"
                if row.unreadable is None
                else f"the contract cannot be read back to hash it ({row.unreadable})",
            }
        )
    for again in events[1:]:
        problems.append(
            {
                **identity,
                "version": row.version,
                "seq": again.seq,
                "problem": f"a second {again.type} event records the same contract (the first "
                f"is at seq {events[0].seq}): events were copied or replayed",
            }
        )
    return problems


def decision_problem(recorded: _Recorded | None, row: StoredDecision) -> dict[str, Any] | None:
    """The problem of one stored gate decision against its ``gate_decided`` event, or None."""
    identity = {"check": "decision", "decision_id": row.id, "contract_id": row.contract_id}
    if recorded is None:
        return {
            **identity,
            "seq": None,
            "problem": "the decision has no gate_decided event: it was added outside calmon, "
            "or its event was deleted",
        }
    expected = _with_recomputed(
        recorded.values, [("policy", "policy_sha256"), ("evidence", "evidence_sha256")]
    )
    differences = _differences(_decision_row(row), expected)
    if not differences:
        return None
    return {
        **identity,
        "seq": recorded.seq,
        "problem": f"the decision differs from its gate_decided event: {', '.join(differences)}",
        "differences": differences,
    }


class _Identified(Protocol):
    """A stored row an event records, by its id."""

    @property
    def id(self) -> str: ...


_Row = TypeVar("_Row", bound=_Identified)


def _contract_deleted(contract_id: str, recorded: _Recorded) -> dict[str, Any]:
    return {
        "check": "contract",
        "contract_id": contract_id,
        "model": recorded.values.get("model"),
        "version": recorded.values.get("version"),
        "seq": recorded.seq,
        "problem": f"the {recorded.type} event has no contract row: the contract was deleted",
    }


def _decision_deleted(decision_id: str, recorded: _Recorded) -> dict[str, Any]:
    return {
        "check": "decision",
        "decision_id": decision_id,
        "contract_id": recorded.values.get("contract_id"),
        "seq": recorded.seq,
        "problem": "the gate_decided event has no decision row: the decision was deleted",
    }


@dataclass
class Problems:
    """Every problem counted, by check; the first ``LISTED_PROBLEMS`` kept in order."""

    listed: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    by_check: dict[str, int] = field(default_factory=dict)

    def add(self, problem: dict[str, Any]) -> None:
        self.count += 1
        self.by_check[problem["check"]] = self.by_check.get(problem["check"], 0) + 1
        if len(self.listed) < LISTED_PROBLEMS:
            self.listed.append(problem)

    def of(self, check: str) -> int:
        return self.by_check.get(check, 0)


@dataclass
class RecordLedger:
    """What the chain's events recorded of contracts, decisions and retirements (fed oldest
    first), checked against the stored rows afterwards."""

    _contracts: dict[str, _Recorded] = field(default_factory=dict)
    _decisions: dict[str, _Recorded] = field(default_factory=dict)
    _retired: dict[str, list[tuple[int, dict[str, Any], str]]] = field(default_factory=dict)
    _again: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, event: ChainEvent) -> None:
        if event.type in CONTRACT_CREATED and event.contract_id is not None:
            self._record(self._contracts, event.contract_id, contract_recorded(event), "contract")
        elif event.type == GATE_DECIDED:
            decided = GateDecided.read(event.details)
            if decided.decision_id is not None:
                recorded = _decision_recorded(event, decided)
                self._record(self._decisions, str(decided.decision_id), recorded, "decision")
        elif event.type == RETIRED and event.contract_id is not None:
            document, digest = _expected_retirement(event)
            self._retired.setdefault(event.contract_id, []).append((event.seq, document, digest))

    def _record(
        self, into: dict[str, _Recorded], key: str, recorded: _Recorded, check: str
    ) -> None:
        first = into.get(key)
        if first is None:
            into[key] = recorded
            return
        name = "contract_id" if check == "contract" else "decision_id"
        self._again.append(
            {
                "check": check,
                name: key,
                "seq": recorded.seq,
                "problem": f"a second {recorded.type} event records the same {check} (the first "
                f"is at seq {first.seq}): events were copied or replayed",
            }
        )

    def check_contracts(self, rows: Iterable[StoredContract], problems: Problems) -> int:
        """Check every row, then report each recorded contract without a row; the rows seen."""
        return self._check_rows(
            "contract", self._contracts, rows, contract_problem, _contract_deleted, problems
        )

    def check_decisions(self, rows: Iterable[StoredDecision], problems: Problems) -> int:
        """Check every row, then report each recorded decision without a row; the rows seen."""
        return self._check_rows(
            "decision", self._decisions, rows, decision_problem, _decision_deleted, problems
        )

    def _check_rows(
        self,
        check: str,
        recorded: Mapping[str, _Recorded],
        rows: Iterable[_Row],
        row_problem: Callable[[_Recorded | None, _Row], dict[str, Any] | None],
        deleted: Callable[[str, _Recorded], dict[str, Any]],
        problems: Problems,
    ) -> int:
        """Check every row against the event that recorded it (``row_problem``), then report
        each recorded ``check`` without a row (``deleted``) and each recorded twice; the rows
        seen."""
        unmatched = dict(recorded)
        checked = 0
        for row in rows:
            checked += 1
            problem = row_problem(unmatched.pop(row.id, None), row)
            if problem is not None:
                problems.add(problem)
        for key, event in unmatched.items():
            problems.add(deleted(key, event))
        for problem in self._again:
            if problem["check"] == check:
                problems.add(problem)
        return checked

    def check_retirements(self, rows: Iterable[RetirementRow], problems: Problems) -> int:
        """Check every retirement row against its ``contract_retired`` event; the rows seen."""
        stored = {r.contract_id: r for r in rows}
        for contract_id in sorted(stored.keys() | self._retired.keys()):
            events = self._retired.get(contract_id, [])
            row = stored.get(contract_id)
            seq = events[-1][0] if events else None
            if len(events) > 1:
                problem = f"retired more than once in the chain (seq {[e[0] for e in events]})"
            elif row is None:
                problem = (
                    "the contract_retired event has no retirement row: the row was deleted, "
                    "which un-retires the contract"
                )
            elif not events:
                problem = "the retirement row has no contract_retired event in the chain"
            else:
                document = retirement_document(
                    row.contract_id, row.reason, row.retired_at, row.retired_by
                )
                expected = events[0][1]
                if _same(retirement_sha256(document), events[0][2]):
                    continue
                changed = sorted(k for k in document if document[k] != expected.get(k))
                problem = "the retirement row differs from its contract_retired event" + (
                    f" ({', '.join(changed)})" if changed else ""
                )
            problems.add(
                {"check": "retirement", "contract_id": contract_id, "seq": seq, "problem": problem}
            )
        return len(stored)


def _expected_retirement(event: ChainEvent) -> tuple[dict[str, Any], str]:
    """The retirement row an event vouches for, and the hash that row must have."""
    retired = ContractRetired.read(event.details)
    document = retired.retirement
    if isinstance(document, dict):
        return document, str(retired.retirement_sha256 or retirement_sha256(document))
    legacy = retirement_document(str(event.contract_id), str(retired.reason), event.ts, event.actor)
    return legacy, retirement_sha256(legacy)
