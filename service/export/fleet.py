"""The fleet's state from the stored readings, a page at a time: which models and cohort slices
are in ``alert`` or ``warn`` now, since when, and how many of their predictions are labeled.

Read-only, and the cost of a page does not grow with the fleet: the models are ordered worst
status first by the worst status each refresh state keeps (one sorted scan of a row per model,
and one count per status), and only the page's models are read in full: their stored readings
(one row per slice and window), their current contracts' ids and versions, their waiting labels
(one count through the partial index) and one audit lookup per slice in ``alert``/``warn`` (the
newest ``drift_status_changed`` event into its status). Nothing is recomputed from buckets, so
the numbers are those of the last refresh; ``current_at`` is when the stored exposition last
found a model's readings current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.audit.lookups import status_since
from service.calibration.vocabulary import ATTENTION, Status, severity_of, worst_status
from service.common.errors import ErrorDetail, ValidationFailed
from service.export.budget import SliceExport
from service.export.change_store import (
    ContractRef,
    current_contracts,
    page_of_models,
    refresh_state,
)
from service.export.reading_store import ReadingRow, all_readings, exposition_times
from service.stream.cohorts import ALL
from service.stream.prediction_store import waiting_label_counts

#: Models per page of the overview.
PAGE_SIZE = 50


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
    """One model: its current contract (id, version, retired), its worst stored status (None
    before the first refresh), the slices in ``alert``/``warn`` worst first, the ``all`` slice
    of each window, the labels waiting for their prediction, and since when its stored readings
    are known current (None: never refreshed)."""

    model: str
    contract: ContractRef
    status: str | None
    attention: tuple[SliceState, ...]
    overall: tuple[SliceState, ...]
    waiting_labels: int
    computed_at: datetime | None


@dataclass(frozen=True)
class Fleet:
    """One page of the models with a contract, worst status first (then by name), with the
    fleet's size and its count of models per worst status (None: not refreshed yet)."""

    models: tuple[ModelState, ...]
    windows: tuple[str, ...]
    total: int = 0
    statuses: dict[str | None, int] = field(default_factory=dict)
    page: int = 1
    page_size: int = PAGE_SIZE

    def count(self, status: str | None) -> int:
        """How many models of the fleet have worst status ``status``."""
        return self.statuses.get(status, 0)

    @property
    def pages(self) -> int:
        """How many pages the fleet fills (at least 1)."""
        return max(-(-self.total // self.page_size), 1)

    @property
    def first(self) -> int:
        """The 1-based position of the page's first model in the fleet."""
        return (self.page - 1) * self.page_size + 1


def _state(session: Session, row: ReadingRow, with_since: bool) -> SliceState:
    status = str(row.values.get("status", Status.INSUFFICIENT_DATA))
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
    return (-severity_of(state.status), since, state.cohort != ALL, state.cohort, rank)


def model_state(
    session: Session,
    model: str,
    rows: Sequence[ReadingRow],
    windows: Sequence[str],
    contract: ContractRef,
    current_at: datetime | None = None,
    waiting_labels: int = 0,
) -> ModelState:
    """One model's state from its stored reading rows."""
    attention = [_state(session, r, True) for r in rows if r.values.get("status") in ATTENTION]
    attention.sort(key=lambda s: _attention_order(s, windows))
    overall = [_state(session, r, False) for r in rows if r.cohort == ALL]
    overall.sort(key=lambda s: windows.index(s.window) if s.window in windows else len(windows))
    statuses = [str(r.values.get("status")) for r in rows]
    return ModelState(
        model=model,
        contract=contract,
        status=worst_status(statuses),
        attention=tuple(attention),
        overall=tuple(overall),
        waiting_labels=waiting_labels,
        computed_at=current_at,
    )


def fleet_overview(session: Session, windows: Sequence[str], now: datetime, page: int = 1) -> Fleet:
    """Page ``page`` (1-based, ``PAGE_SIZE`` models) of the fleet, worst first; ``windows``
    (the refresher's, in order) orders the slices. ``ValidationFailed`` naming ``page`` for a
    page below 1."""
    if page < 1:
        raise ValidationFailed("invalid page", [ErrorDetail("page", "must be 1 or more")])
    names, statuses = page_of_models(session, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    by_model: dict[str, list[ReadingRow]] = {name: [] for name, _ in names}
    if names:
        for row in all_readings(session, models=list(by_model)):
            by_model[row.model].append(row)
    times = exposition_times(session)
    contracts = current_contracts(session, list(by_model), now)
    waiting = waiting_label_counts(session, list(by_model))
    states = []
    for name, status in names:
        current_at = None
        if status is not None and times is not None:
            current_at = datetime.fromtimestamp(times.current_since(name), UTC)
        states.append(
            model_state(
                session,
                name,
                by_model[name],
                windows,
                contracts[name],
                current_at,
                waiting.get(name, 0),
            )
        )
    return Fleet(
        tuple(states),
        tuple(windows),
        total=sum(statuses.values()),
        statuses=statuses,
        page=page,
    )


@dataclass(frozen=True)
class WindowSummary:
    """A model's stored state in one window: the worst status of its slices there, and the
    ``all`` slice's labeled predictions and predictions (0 without a stored ``all`` reading)."""

    window: str
    status: str
    labeled_predictions: int
    predictions: int


@dataclass(frozen=True)
class ModelSummary:
    """One model of the fleet: its worst stored status over every slice and window (None before
    its first refresh, as on the fleet page), its current contract, its state per window (in
    the refresher's order; windows without a stored reading are left out) and the labels
    waiting for their prediction."""

    model: str
    status: str | None
    contract_id: str
    contract_version: int
    windows: tuple[WindowSummary, ...]
    waiting_labels: int


def model_summaries(
    session: Session, windows: Sequence[str], now: datetime, offset: int, limit: int
) -> list[tuple[int, ModelSummary]]:
    """Up to ``limit`` models of the fleet after the first ``offset``, in the fleet page's
    order (worst status first, then by name), each with its 1-based position in that order.

    Read from the stored readings as ``fleet_overview`` reads them, without the audit lookups:
    a model's ``status`` is the fleet page's, and each window's is the worst of its slices."""
    names, _ = page_of_models(session, offset, limit)
    by_model: dict[str, list[ReadingRow]] = {name: [] for name, _ in names}
    if names:
        for row in all_readings(session, models=list(by_model)):
            by_model[row.model].append(row)
    contracts = current_contracts(session, list(by_model), now)
    waiting = waiting_label_counts(session, list(by_model))
    out = []
    for position, (name, _) in enumerate(names, start=offset + 1):
        rows = by_model[name]
        seen = {row.window for row in rows}
        order = [w for w in windows if w in seen] + sorted(seen - set(windows))
        per_window = []
        for window in order:
            in_window = [r for r in rows if r.window == window]
            statuses = [str(r.values.get("status", Status.INSUFFICIENT_DATA)) for r in in_window]
            overall = [r for r in in_window if r.cohort == ALL]
            values = overall[0].values if overall else {}
            per_window.append(
                WindowSummary(
                    window=window,
                    status=worst_status(statuses) or Status.INSUFFICIENT_DATA,
                    labeled_predictions=int(values.get("labeled_predictions") or 0),
                    predictions=int(values.get("predictions") or 0),
                )
            )
        contract = contracts[name]
        summary = ModelSummary(
            model=name,
            status=worst_status([str(r.values.get("status")) for r in rows]),
            contract_id=contract.id,
            contract_version=contract.version,
            windows=tuple(per_window),
            waiting_labels=waiting.get(name, 0),
        )
        out.append((position, summary))
    return out


def slice_export(session: Session, model: str) -> SliceExport | None:
    """Which slices of ``model`` the refresher exports to Prometheus and how many it does not
    (None before its first refresh)."""
    state = refresh_state(session, model)
    return None if state is None else SliceExport(state.exported, state.unexported)
