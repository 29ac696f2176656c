"""What a refresh cycle recomputes, decided from the fleet's changes alone (no SQL here).

A reading is a pure function of the buckets inside its window, the model's contracts and the
window's bounds. So a model has work when it was never refreshed, when its inputs key (contract
set, windows, series budget) changed, when some of its slices were written (change markers) or
when some of its readings are due (their trailing window's edge passed a bucket holding data:
``stale_at``). A cycle takes those models longest behind first (``priority``), so that one
whose time budget runs out leaves the most recently current models for the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.config import Settings
from service.export.change_store import FleetModel, Markers, StateRow
from service.export.reading_store import ExpositionTimes
from service.stream.bucket_store import EVERY_SLICE
from service.stream.windows import FINE, Window, parse_duration


def inputs_key(fleet_model: FleetModel, settings: Settings) -> str:
    """What, besides buckets, a model's readings are computed from: its contract set, the
    windows and the series budget."""
    windows = ",".join(settings.windows)
    return (
        f"contracts={fleet_model.contracts_key};windows={windows};"
        f"slices={settings.max_slices_per_model}"
    )


@dataclass(frozen=True)
class ModelWork:
    """What a cycle must do for one model: its inputs key now, its refresh state (None: never
    refreshed), the change markers read (slice -> token), its due (cohort, window) readings,
    and since when (epoch seconds) its served readings are current."""

    model: str
    inputs_key: str
    state: StateRow | None
    markers: Mapping[str, int] = field(default_factory=dict)
    due: frozenset[tuple[str, str]] = frozenset()
    since: float = 0.0

    @property
    def full(self) -> bool:
        """Whether every reading of the model is recomputed."""
        return (
            self.state is None
            or self.state.inputs_key != self.inputs_key
            or EVERY_SLICE in self.markers
        )


def plan_work(
    fleet: Mapping[str, FleetModel],
    states: Mapping[str, StateRow],
    markers: Markers,
    due: Mapping[str, set[tuple[str, str]]],
    settings: Settings,
    previous: ExpositionTimes | None = None,
) -> list[ModelWork]:
    """The models of ``fleet`` with something to recompute, in the order a cycle takes them
    (``priority``); ``previous`` holds the stored exposition's times."""
    out = []
    for model, fleet_model in fleet.items():
        work = ModelWork(
            model,
            inputs_key(fleet_model, settings),
            states.get(model),
            markers.get(model, {}),
            frozenset(due.get(model, ())),
            current_since(model, fleet_model, previous),
        )
        if work.full or work.markers or work.due:
            out.append(work)
    return sorted(out, key=priority)


def current_since(model: str, fleet_model: FleetModel, previous: ExpositionTimes | None) -> float:
    """Since when (epoch seconds) the served readings of ``model`` are current: as the stored
    exposition says, or since its first contract for a model it does not cover yet."""
    if previous is not None and model in previous.covered:
        return previous.current_since(model)
    return fleet_model.registered_at.timestamp()


def priority(work: ModelWork) -> tuple[float, bool, str]:
    """The order of a cycle's models: the longest behind first, so that a model a cycle left
    for the next (its budget spent) goes before any that fell behind after it; among models
    equally behind (every model the last cycle found current), those with new data (change
    markers) before those that only have due readings, a new contract or no data; then by
    name."""
    return (work.since, not work.markers, work.model)


def stale_at(window: Window, first: datetime | None, after_end: datetime | None) -> datetime | None:
    """When the trailing ``window``'s reading stops being current without any new write: when
    its start passes ``first`` (the first 5-minute bucket with data at or after its start), if
    that lies inside it, or its end reaches ``after_end`` (the first bucket with data at or
    after its end); None: never."""
    assert window.name is not None
    if first is None or first >= window.end:
        return after_end
    # The start floor(now - d, 5 min) passes the bucket at `first` once now >= first + d + 5 min.
    passes = first + parse_duration(window.name) + FINE
    return passes if after_end is None else min(passes, after_end)
