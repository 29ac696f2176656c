"""The fleet's state from the stored readings: which models and cohort slices are in ``alert`` or
``warn`` now, since when, and how many of their predictions are labeled.

Read-only and cheap: the refresher's stored readings (one row per model, slice and window), one
audit lookup per slice in ``alert``/``warn`` (the newest ``drift_status_changed`` event into its
status) and one count of waiting labels per model (through its partial index). Nothing is
recomputed from buckets, so the numbers are those of the last refresh (``computed_at``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from service.audit.lookups import status_since
from service.contracts import service as contracts_service
from service.contracts.model import Contract
from service.export.reading_store import ReadingRow, all_readings
from service.stream.cohorts import ALL
from service.stream.prediction_store import count_waiting_labels

#: Worst first: the order of statuses on the overview.
SEVERITY = {"alert": 3, "warn": 2, "ok": 1, "insufficient_data": 0}
ATTENTION = ("alert", "warn")


@dataclass(frozen=True)
class SliceState:
    """A slice's stored reading in one window: its status, since when (UTC; None when no
    transition into it is recorded: it has held since the slice's first stored reading), counts
    and the status's reasons."""

    cohort: str
    window: str
    status: str
    since: datetime | None
    n_labeled: int
    n_predictions: int
    reasons: tuple[str, ...]

    @property
    def n_unlabeled(self) -> int:
        """Predictions still waiting for their label."""
        return max(self.n_predictions - self.n_labeled, 0)


@dataclass(frozen=True)
class ModelState:
    """One model: its current contract, its worst stored status (None before the first
    refresh), the slices in ``alert``/``warn`` worst first, the ``all`` slice of each window,
    the labels waiting for their prediction, and when its readings were computed."""

    model: str
    contract: Contract
    status: str | None
    attention: tuple[SliceState, ...]
    overall: tuple[SliceState, ...]
    waiting_labels: int
    computed_at: datetime | None


@dataclass(frozen=True)
class Fleet:
    """Every model with a contract, worst status first (then by name)."""

    models: tuple[ModelState, ...]
    windows: tuple[str, ...]

    def count(self, status: str) -> int:
        """How many models' worst status is ``status``."""
        return sum(1 for m in self.models if m.status == status)


def _state(session: Session, row: ReadingRow, with_since: bool) -> SliceState:
    status = str(row.values.get("status", "insufficient_data"))
    since = status_since(session, row.model, row.cohort, row.window, status) if with_since else None
    return SliceState(
        cohort=row.cohort,
        window=row.window,
        status=status,
        since=since,
        n_labeled=int(row.values.get("labeled_predictions") or 0),
        n_predictions=int(row.values.get("predictions") or 0),
        reasons=tuple(str(r) for r in row.values.get("reasons") or ()),
    )


def _attention_order(state: SliceState, windows: Sequence[str]) -> tuple[object, ...]:
    rank = windows.index(state.window) if state.window in windows else len(windows)
    since = state.since.timestamp() if state.since is not None else float("-inf")
    return (-SEVERITY.get(state.status, 0), since, state.cohort != ALL, state.cohort, rank)


def model_state(
    session: Session, model: str, rows: Sequence[ReadingRow], windows: Sequence[str], now: datetime
) -> ModelState:
    """One model's state from its stored reading rows."""
    attention = [_state(session, r, True) for r in rows if r.values.get("status") in ATTENTION]
    attention.sort(key=lambda s: _attention_order(s, windows))
    overall = [_state(session, r, False) for r in rows if r.cohort == ALL]
    overall.sort(key=lambda s: windows.index(s.window) if s.window in windows else len(windows))
    statuses = [str(r.values.get("status")) for r in rows]
    return ModelState(
        model=model,
        contract=contracts_service.current_contract(session, model, now),
        status=max(statuses, key=lambda s: SEVERITY.get(s, 0)) if statuses else None,
        attention=tuple(attention),
        overall=tuple(overall),
        waiting_labels=count_waiting_labels(session, model),
        computed_at=max((r.computed_at for r in rows), default=None),
    )


def fleet_overview(session: Session, windows: Sequence[str], now: datetime) -> Fleet:
    """Every model's state; ``windows`` (the refresher's, in order) orders the slices."""
    by_model: dict[str, list[ReadingRow]] = {}
    for row in all_readings(session):
        by_model.setdefault(row.model, []).append(row)
    states = [
        model_state(session, model, by_model.get(model, []), windows, now)
        for model in contracts_service.model_names(session)
    ]
    states.sort(key=lambda m: (-SEVERITY.get(m.status or "", -1), m.model))
    return Fleet(tuple(states), tuple(windows))
