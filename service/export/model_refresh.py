"""One model's refresh: recompute the readings its work names (``service.export.plan``), then
store them with the audit events of their status changes, its refresh state and its rendered
exposition fragment, and clear the change markers it consumed. Models without any bucket are
refreshed together (``refresh_without_data``). ``service.export.refresher`` runs these for the
fleet each cycle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from service.audit import store as audit
from service.audit.events import StatusChanged
from service.calibration.vocabulary import Status, severity_of, worst_status
from service.config import Settings
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.db.database import Database
from service.export import change_store
from service.export.budget import SliceExport, choose_exported
from service.export.change_store import NewState
from service.export.collector import model_fragment
from service.export.plan import ModelWork, stale_at
from service.export.reading_store import (
    ReadingRow,
    all_readings,
    model_readings,
    replace_readings,
    write_readings,
)
from service.stream import bucket_store
from service.stream.bucket_store import EVERY_SLICE
from service.stream.monitoring import WindowReading, calibration_readings, reading_without_data
from service.stream.windows import Window

#: The actor of the audit events a refresh writes.
REFRESHER = "refresher"


def _number(value: float | None) -> float | None:
    """A measure as stored: a Python float, None for no value (None or NaN)."""
    return None if value is None or math.isnan(value) else float(value)


def gauge_values(window_reading: WindowReading) -> dict[str, Any]:
    """The numbers the Prometheus gauges show, from a window reading (None: no value), with the
    drift status, its reasons and the contract policy's ``max_ece``: what is stored per reading."""
    reading, drift = window_reading.reading, window_reading.drift
    refit, shift, expected = (
        drift.refit_temperature,
        drift.confidence_shift,
        drift.expected_accuracy,
    )
    return {
        "ece": _number(reading.ece),
        "ece_debiased": _number(reading.ece_debiased),
        "ece_ci_lower": _number(reading.ece_ci[0]),
        "ece_ci_upper": _number(reading.ece_ci[1]),
        "nll": _number(reading.nll),
        "brier": _number(reading.brier),
        "accuracy": _number(reading.accuracy),
        "mean_confidence": _number(reading.mean_confidence),
        "predictions": window_reading.n_predictions,
        "labeled_predictions": window_reading.n_labeled,
        "label_coverage": window_reading.label_coverage,
        "ece_delta": _number(drift.ece_delta),
        "refit_temperature": None if refit is None else refit.temperature,
        "confidence_psi": None if shift is None else _number(shift.psi),
        "expected_accuracy": None if expected is None else expected.value,
        "drift_status": Status(drift.status).gauge_value,
        "status": drift.status,
        "reasons": list(drift.reasons),
        "policy_max_ece": window_reading.contract.policy.max_ece,
    }


@dataclass(frozen=True)
class ModelRefresh:
    """What refreshing one model did: readings recomputed, and its new fragment (None: its
    exposition did not change)."""

    readings: int
    fragment: list[str] | None


@dataclass(frozen=True)
class _Computed:
    """One model's refresh as computed, before it is stored: its readings before, those
    recomputed, those to delete, and the refresh state it leaves (None: its exposition does
    not change)."""

    work: ModelWork
    previous: dict[tuple[str, str], ReadingRow]
    computed: list[ReadingRow]
    obsolete: set[tuple[str, str]]
    state: NewState | None

    @property
    def result(self) -> ModelRefresh:
        return ModelRefresh(len(self.computed), None if self.state is None else self.state.fragment)


def _computed(
    work: ModelWork,
    previous: dict[tuple[str, str], ReadingRow],
    export: SliceExport,
    computed: list[ReadingRow],
    obsolete: set[tuple[str, str]],
    now: datetime,
) -> _Computed:
    """A model's refresh from its readings before, those recomputed at ``now``, those to delete
    and its slices exported: its fragment re-rendered if anything it shows changed."""
    state = work.state
    current = {k: r for k, r in previous.items() if k not in obsolete}
    current.update({(r.cohort, r.window): r for r in computed})
    statuses = [str(r.values.get("status")) for r in current.values()]
    status = worst_status(statuses)
    rerender = (
        bool(computed or obsolete)
        or state is None
        or state.inputs_key != work.inputs_key
        or (state.exported, state.unexported) != (export.exported, export.unexported)
    )
    new_state = None
    if rerender:
        rows = [current[k] for k in sorted(current)]
        new_state = NewState(
            work.model,
            work.inputs_key,
            export.exported,
            export.unexported,
            status,
            severity_of(status),
            model_fragment(work.model, rows, export.unexported),
            now,
        )
    return _Computed(work, previous, computed, obsolete, new_state)


def refresh_model(db: Database, work: ModelWork, settings: Settings, now: datetime) -> ModelRefresh:
    """Recompute what ``work`` says of one model (read-only), then store its readings, the
    audit events of its status changes, its refresh state and clear the markers read, in one
    short transaction. A model without any slice seen (no bucket: no prediction yet) has its
    readings measured against its current contract without reading buckets."""
    model, state = work.model, work.state
    with db.read_session() as session:
        previous = model_readings(session, model)
        dirty = set(work.markers) - {EVERY_SLICE}
        seen = True
        if work.full or dirty:
            counts = bucket_store.slice_counts(session, model)
            seen = bool(counts)
            export = choose_exported(
                ((name, labeled) for name, _, labeled in counts),
                state.exported if state else (),
                settings.max_slices_per_model,
            )
        else:
            assert state is not None
            export = SliceExport(state.exported, state.unexported)
        wanted = [(s, w) for s in export.exported for w in settings.windows]
        entering = set(export.exported) - set(state.exported if state else ())
        todo = [
            (s, w)
            for s, w in wanted
            if work.full
            or s in dirty
            or s in entering
            or (s, w) in work.due
            or (s, w) not in previous
        ]
        obsolete = set(previous) - set(wanted)
        if seen:
            computed = _readings(session, model, todo, now)
        else:
            contract = contracts_store.current_contracts(session, [model], now)[model]
            computed = _readings_without_data(contract, model, todo, now)
    done = _computed(work, previous, export, computed, obsolete, now)
    with db.session() as session:
        if computed or obsolete:
            write_readings(session, model, computed, obsolete)
        _audit_changes(session, previous, computed, now)
        if done.state is not None:
            change_store.save_states(session, [done.state])
        change_store.clear_markers(session, model, work.markers)
        session.commit()
    return done.result


def maybe_without_data(work: ModelWork) -> bool:
    """Whether ``work`` may be refreshed by ``refresh_without_data``: every reading of the model
    is recomputed, and no change marker or due reading says it holds data."""
    return work.full and not work.markers and not work.due


def refresh_without_data(
    db: Database, works: Sequence[ModelWork], settings: Settings, now: datetime
) -> tuple[dict[str, ModelRefresh], list[ModelWork]]:
    """Refresh together those of ``works`` (each ``maybe_without_data``) whose models hold no
    bucket: one read transaction (which of them hold buckets, their stored readings, their
    current contracts) and one write transaction for all; each reading measured without data.
    Returns their refreshes by model, and the works of the models that hold buckets."""
    with db.read_session() as session:
        seen = bucket_store.models_with_buckets(session, [w.model for w in works])
        empty = [w for w in works if w.model not in seen]
        names = [w.model for w in empty]
        previous: dict[str, dict[tuple[str, str], ReadingRow]] = {name: {} for name in names}
        for row in all_readings(session, models=names) if names else ():
            previous[row.model][(row.cohort, row.window)] = row
        contracts = contracts_store.current_contracts(session, names, now)
    done = []
    for work in empty:
        model, state = work.model, work.state
        export = choose_exported((), state.exported if state else (), settings.max_slices_per_model)
        wanted = [(s, w) for s in export.exported for w in settings.windows]
        computed = _readings_without_data(contracts[model], model, wanted, now)
        obsolete = set(previous[model]) - set(wanted)
        done.append(_computed(work, previous[model], export, computed, obsolete, now))
    if done:
        with db.session() as session:
            replace_readings(session, names, [r for d in done for r in d.computed])
            for d in done:
                _audit_changes(session, d.previous, d.computed, now)
            change_store.save_states(session, [d.state for d in done if d.state is not None])
            session.commit()
    return {d.work.model: d.result for d in done}, [w for w in works if w.model in seen]


def _readings(
    session: Session, model: str, todo: Iterable[tuple[str, str]], now: datetime
) -> list[ReadingRow]:
    """The readings of ``todo`` ((slice, window) pairs) at ``now``, with their expiry."""
    by_slice: dict[str, list[Window]] = {}
    for slice_, window_name in todo:
        by_slice.setdefault(slice_, []).append(Window.trailing(window_name, now))
    wanted, stale = [], []
    for slice_, windows in by_slice.items():
        # Every trailing window ends at the same bucket: one probe for the end, one per start.
        *firsts, after_end = bucket_store.first_buckets_from(
            session, model, slice_, [*(w.start for w in windows), windows[0].end]
        )
        for window, first in zip(windows, firsts, strict=True):
            wanted.append((slice_, window))
            stale.append(stale_at(window, first, after_end))
    readings = calibration_readings(session, model, wanted, now) if wanted else []
    return [_row(r, now, at) for r, at in zip(readings, stale, strict=True)]


def _readings_without_data(
    contract: Contract, model: str, todo: Iterable[tuple[str, str]], now: datetime
) -> list[ReadingRow]:
    """The readings of ``todo`` at ``now`` for a model holding no bucket, whose current contract
    is ``contract``: each measured without data, as ``calibration_readings`` measures it, and
    never stale by time."""
    return [
        _row(reading_without_data(contract, model, Window.trailing(name, now), slice_), now, None)
        for slice_, name in todo
    ]


def _row(reading: WindowReading, now: datetime, stale: datetime | None) -> ReadingRow:
    """The stored row of a reading computed at ``now``, stale at ``stale``."""
    window, contract = reading.window, reading.contract
    assert window.name is not None
    return ReadingRow(
        reading.model,
        reading.cohort,
        window.name,
        contract.id,
        contract.version,
        now,
        gauge_values(reading),
        stale,
    )


def _audit_changes(
    session: Session,
    previous: Mapping[tuple[str, str], ReadingRow],
    computed: Iterable[ReadingRow],
    now: datetime,
) -> None:
    """One ``drift_status_changed`` event per recomputed reading whose status changed."""
    for row in computed:
        before = previous.get((row.cohort, row.window))
        if before is None or before.values.get("status") == row.values["status"]:
            continue
        audit.append_event(
            session,
            StatusChanged(
                cohort=row.cohort,
                window=row.window,
                from_status=before.values.get("status"),
                to=row.values["status"],
                reasons=row.values["reasons"],
            ),
            actor=REFRESHER,
            now=now,
            model=row.model,
            contract_id=row.contract_id,
        )
