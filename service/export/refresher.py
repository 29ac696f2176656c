"""The periodic refresh: recompute the (model, cohort slice, window) readings whose inputs
changed, store them, and assemble the exposition Prometheus scrapes.

A reading is a pure function of the buckets inside its window, the model's contracts and the
window's bounds, so a cycle recomputes exactly:

- the readings of the slices whose buckets were written since the last cycle (their change
  markers, ``bucket_changes``, written in each bucket write's transaction);
- the readings whose trailing window's edge has passed a bucket holding data (their
  ``stale_at``: the window's start passed its first bucket with data, or its end reached the
  first bucket after it);
- every reading of a model whose contract set (a new version, a retirement), the refreshed
  windows or the series budget changed, or that was never refreshed (its inputs key);
- the readings of slices entering the model's series budget (``service.export.budget``), while
  those of slices leaving it are deleted.

The fleet's changes are read in a few statements (markers, contract fingerprints, due readings,
refresh states), so a model with nothing new costs nothing. Each changed model is computed in a
read-only transaction and written in a short one (its readings, the audit events of its status
changes, its refresh state with its rendered exposition fragment, the markers it consumed), so
on SQLite no writer waits for a model's computation. The exposition is then the concatenation
of the models' fragments, stored in one row with the models' times; when no fragment changed
only its time moves. Prometheus scrapes read only that row, so every worker and replica answers
the same numbers and a scrape never sees a half-refreshed fleet.

A cycle has a time budget (the ``Refresher``'s: ``BUDGET_SHARE`` of the refresh interval). It
takes the models with work longest behind first (``plan.priority``; among models equally
behind, those with new data first) and begins none once the budget is spent: it then stores the
exposition, the models it did not reach keep their markers and count as behind, and the next
cycle, which the ``Refresher`` starts at once, takes them first. However many models change or
are registered at once, the exposition, and with it every model's age, is thus renewed at least
once per interval plus a cycle, and a model left over waits one cycle more. Models without any
bucket (just registered) are refreshed together, up to ``NO_DATA_RUN`` consecutive ones in one
read and one write transaction (``refresh_without_data``): their readings are those of no data
against their current contracts (``service.stream.monitoring.reading_without_data``).

Each cycle first joins labels left waiting though their prediction is stored and folds the
labels queued since the last cycle into their buckets (``service.stream.fold``), so the readings
it computes count every label acknowledged before the cycle began. Between cycles the holder of
the lease folds as well, ``FOLDS_PER_REFRESH`` times per refresh interval in all, so a label
waits for the fold about a third of an interval plus the fold's own time.

One refresher runs at a time: whoever holds the ``refresh`` lease (a row with an expiry, so a
crashed holder is replaced), renewed during a long cycle. A model whose refresh raises is
skipped: it is logged and counted (``calmon_refresh_failures_total{model}``), its markers stay
(it is retried next cycle), its previous readings stay stored and served, and its
``calmon_readings_age_seconds`` grows, while every other model's readings and the exposition
are refreshed as usual. Maintenance steps are isolated the same way.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from service.common.clock import utcnow
from service.config import Settings
from service.db.database import Database, refresh_planner_statistics
from service.export import change_store
from service.export.change_store import FleetModel
from service.export.collector import assemble
from service.export.instruments import REFRESH_FAILURES
from service.export.lease_store import try_acquire
from service.export.model_refresh import (
    ModelRefresh,
    maybe_without_data,
    refresh_model,
    refresh_without_data,
)
from service.export.plan import ModelWork, current_since, plan_work
from service.export.reading_store import (
    ExpositionTimes,
    exposition_times,
    store_exposition,
)
from service.stream import fold_store
from service.stream.fold import fold_model
from service.stream.ingestion import sweep_waiting_labels
from service.stream.prediction_store import models_with_waiting_labels
from service.stream.retention import expire_pending

log = logging.getLogger(__name__)

#: How often the refresher refreshes the planner's statistics and expires pending labels.
MAINTAIN_EVERY = timedelta(minutes=5)

#: Folds of the queued labels per refresh interval: one at the start of each cycle and the others
#: at even steps between cycles.
FOLDS_PER_REFRESH = 3


#: The share of ``CALMON_REFRESH_SECONDS`` a refresher's cycle spends refreshing models before it
#: stores the exposition and leaves the models it has not reached to the next cycle.
BUDGET_SHARE = 1 / 3
#: Models without data a cycle refreshes together (``refresh_without_data``), at most.
NO_DATA_RUN = 100


@dataclass(frozen=True)
class RefreshReport:
    """One refresh: models in the fleet, readings recomputed, wall time (s), models that
    failed, models with work, and how many of those it left for the next cycle (its time budget
    spent)."""

    models: int
    readings: int
    seconds: float
    failed: tuple[str, ...] = ()
    changed: int = 0
    carried: int = 0


class LeaseLost(RuntimeError):
    """Another refresher holds the lease now: this one stops its cycle."""


def log_failure(message: str, exc: Exception, **fields: Any) -> None:
    """Log a failed step with the exception's type; a database error by class name only (its
    text may quote parameters), anything else with its traceback."""
    log.error(
        "%s: %s",
        message,
        type(exc).__name__,
        extra={**fields, "error": type(exc).__name__},
        exc_info=None if isinstance(exc, SQLAlchemyError) else exc,
    )


class FragmentCache:
    """The models' exposition fragments as last read or rendered, with when each was rendered:
    a refresher reads from the database only the fragments rendered since (by another
    process, or before it started)."""

    def __init__(self) -> None:
        self._fragments: dict[str, tuple[datetime, list[str]]] = {}

    def put(self, model: str, rendered_at: datetime, fragment: list[str]) -> None:
        self._fragments[model] = (rendered_at, fragment)

    def ordered(
        self, db: Database, stamps: Mapping[str, datetime], models: Iterable[str]
    ) -> list[list[str]]:
        """The fragments of ``models`` (in order) that have one, as rendered at ``stamps``."""
        stale = [m for m, at in stamps.items() if self._fragments.get(m, (None,))[0] != at]
        if stale:
            with db.read_session() as session:
                self._fragments.update(change_store.fragments(session, stale))
        return [self._fragments[m][1] for m in models if m in stamps and m in self._fragments]


def _sweep_waiting(db: Database) -> None:
    """Join the labels left waiting though their prediction is stored, for the models that
    have waiting labels (one transaction each; a failing model is logged and skipped)."""
    with db.read_session() as session:
        models = models_with_waiting_labels(session)
    for model in models:
        try:
            with db.session() as session:
                swept = sweep_waiting_labels(session, model)
            if swept:
                log.info("joined waiting labels", extra={"model": model, "labels": swept})
        except Exception as exc:
            log_failure("joining waiting labels failed", exc, model=model)


def _fold_labels(db: Database, now: datetime) -> None:
    """Count the queued labels of every model that has some (``service.stream.fold``), each
    chunk in its own transaction; a failing model is logged and skipped (its labels stay
    queued for the next cycle)."""
    with db.read_session() as session:
        models = fold_store.models_with_queued(session)
    for model in models:
        try:
            with db.session() as session:
                folded = fold_model(session, model, now)
            if folded:
                log.info("folded labels", extra={"model": model, "labels": folded})
        except Exception as exc:
            log_failure("folding labels failed", exc, model=model)


def refresh_all(
    db: Database,
    settings: Settings,
    now: datetime | None = None,
    *,
    keep_lease: Callable[[], bool] | None = None,
    cache: FragmentCache | None = None,
    budget: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RefreshReport:
    """Recompute the readings whose inputs changed, one model at a time in the order of
    ``plan.priority`` (longest behind first), then store the exposition.

    With a ``budget`` (seconds of ``clock``, a monotonic clock), no model is begun once the
    cycle has run that long, its first model aside: the models not reached keep their markers
    and previous readings, count as behind like a failed model (their age goes on growing) and
    are the first of the next cycle, while the exposition is stored at once. A model whose
    refresh raises is logged, counted in ``calmon_refresh_failures_total`` and left with its
    previous readings; the others go on. ``keep_lease`` (renew the lease; False when another
    refresher holds it) is called before each model: once it fails the cycle stops with
    ``LeaseLost`` and stores no exposition. Raises only if the fleet's changes or the
    exposition cannot be read or stored.
    """
    start = clock()
    now = now or utcnow()
    cache = cache or FragmentCache()
    _sweep_waiting(db)
    _fold_labels(db, now)
    with db.read_session() as session:
        # Markers first: a bucket write committed after this read keeps its marker for the
        # next cycle, and every write committed before it is seen by the readings below.
        markers = change_store.read_markers(session)
        fleet = change_store.fleet_models(session)
        states = change_store.refresh_states(session)
        due = change_store.due_readings(session, now)
        previous = exposition_times(session)
    work = plan_work(fleet, states, markers, due, settings, previous)
    readings, failed, stamps = 0, [], {m: s.rendered_at for m, s in states.items()}
    carried: list[str] = []
    steps = _steps(work)
    for i, step in enumerate(steps):
        if i and budget is not None and clock() - start >= budget:
            carried = [w.model for later in steps[i:] for w in later]
            break
        if keep_lease is not None and not keep_lease():
            raise LeaseLost("another refresher holds the refresh lease")
        refreshed: dict[str, ModelRefresh] = {}
        alone: Sequence[ModelWork] = step
        if maybe_without_data(step[0]):
            try:
                refreshed, alone = refresh_without_data(db, step, settings, now)
            except Exception as exc:
                log_failure("refresh of models without data failed", exc, models=len(step))
        for item in alone:
            try:
                refreshed[item.model] = refresh_model(db, item, settings, now)
            except Exception as exc:
                failed.append(item.model)
                REFRESH_FAILURES.labels(item.model).inc()
                log_failure("model refresh failed", exc, model=item.model)
        for model, done in refreshed.items():
            readings += done.readings
            if done.fragment is not None:
                stamps[model] = now
                cache.put(model, now, done.fragment)
    models = sorted(fleet)
    late = [*failed, *carried]
    times = ExpositionTimes(now, tuple(models), _behind(fleet, stamps, late, previous))
    unchanged = (
        previous is not None
        and previous.models == times.models
        and all(at <= previous.computed_at for at in stamps.values())
    )
    body = None if unchanged else assemble(cache.ordered(db, stamps, models))
    with db.session() as session:
        store_exposition(session, body, now, times)
        session.commit()
    return RefreshReport(
        len(fleet), readings, clock() - start, tuple(failed), len(work), len(carried)
    )


def _steps(work: Sequence[ModelWork]) -> list[list[ModelWork]]:
    """The cycle's models in order, in the steps it takes them: runs of up to ``NO_DATA_RUN``
    consecutive models that may hold no data (``maybe_without_data``) together, any other
    model alone."""
    steps: list[list[ModelWork]] = []
    for item in work:
        last = steps[-1] if steps else []
        together = maybe_without_data(item) and bool(last) and maybe_without_data(last[0])
        if together and len(last) < NO_DATA_RUN:
            last.append(item)
        else:
            steps.append([item])
    return steps


def _behind(
    fleet: Mapping[str, FleetModel],
    stamps: Mapping[str, datetime],
    late: Iterable[str],
    previous: ExpositionTimes | None,
) -> dict[str, float]:
    """Since when (epoch seconds) the readings of the models not current now are current: a
    ``late`` model's (failed, or left for the next cycle) since the last exposition that had it
    current, a model never refreshed since its first contract."""
    behind = {m: f.registered_at.timestamp() for m, f in fleet.items() if m not in stamps}
    behind.update({m: current_since(m, fleet[m], previous) for m in late})
    return behind


def expire_pending_labels(db: Database, settings: Settings, now: datetime) -> int:
    """Delete the labels that have waited ``pending_label_days`` for their prediction, one
    transaction per model with waiting labels (a failing model is logged and skipped); returns
    how many."""
    with db.read_session() as session:
        models = models_with_waiting_labels(session)
    total = 0
    for model in models:
        try:
            with db.session() as session:
                total += expire_pending(session, model, settings, now)
        except Exception as exc:
            log_failure("expiring pending labels failed", exc, model=model)
    return total


class Refresher:
    """A daemon thread that refreshes the stored readings every ``refresh_seconds``, each
    cycle within a time budget of ``BUDGET_SHARE`` of that (``refresh_all``; ``clock`` measures
    it), and at once again after a cycle that left models for the next.

    Each service process runs one; the lease makes sure only one of them works per period.
    """

    def __init__(
        self, db: Database, settings: Settings, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.db = db
        self.settings = settings
        self.budget = settings.refresh_seconds * BUDGET_SHARE
        self._clock = clock
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.loop, name="calmon-refresher", daemon=True)
        self.last_report: RefreshReport | None = None
        self._maintained_at: datetime | None = None
        self._renewed = 0.0
        self._fragments = FragmentCache()

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread is running (started and not yet stopped)."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread, waiting up to ``timeout`` seconds for a refresh under way to end
        (and return its database connection to the pool)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def run_once(self) -> RefreshReport | None:
        """Refresh if this process holds (or wins) the lease; None when another one does."""
        if not self._renew():
            return None
        now = utcnow()
        if self._maintained_at is None or now - self._maintained_at >= MAINTAIN_EVERY:
            self.maintain(now)
            self._maintained_at = now
        try:
            self.last_report = refresh_all(
                self.db,
                self.settings,
                keep_lease=self._keep_lease,
                cache=self._fragments,
                budget=self.budget,
                clock=self._clock,
            )
        except LeaseLost:
            log.warning("refresh stopped: another refresher holds the lease")
            return None
        return self.last_report

    @property
    def _ttl(self) -> timedelta:
        return timedelta(seconds=max(3 * self.settings.refresh_seconds, 60))

    def _renew(self) -> bool:
        """Take or renew the lease; whether this process holds it."""
        with self.db.session() as session:
            acquired = try_acquire(session, "refresh", self.holder, utcnow(), self._ttl)
            session.commit()
        if acquired:
            self._renewed = time.monotonic()
        return acquired

    def _keep_lease(self) -> bool:
        """Renew the lease once a third of its time has passed since the last renewal, so a
        long cycle keeps it; False once another process has taken it."""
        if time.monotonic() - self._renewed < self._ttl.total_seconds() / 3:
            return True
        return self._renew()

    def maintain(self, now: datetime) -> None:
        """Planner statistics of ``predictions`` and ``labels`` (PostgreSQL), expiry of pending
        labels: each on its own, so one failing neither stops the other nor the refresh."""
        try:
            with self.db.session() as session:
                refresh_planner_statistics(
                    session, ("predictions", "labels", "calibration_buckets")
                )
                session.commit()
        except Exception as exc:
            log_failure("refreshing planner statistics failed", exc)
        try:
            expire_pending_labels(self.db, self.settings, now)
        except Exception as exc:
            log_failure("expiring pending labels failed", exc)

    def run_logged(self) -> RefreshReport | None:
        """``run_once`` that logs and swallows a failure (the database gone, say), so a loop
        around it keeps going; None when it failed or another process holds the lease."""
        try:
            report = self.run_once()
        except SQLAlchemyError as exc:
            log.warning("refresh failed: %s", type(exc).__name__)
            return None
        except Exception:
            log.exception("refresh failed")
            return None
        if report is not None:
            log.info(
                "refreshed readings",
                extra={
                    "models": report.models,
                    "changed": report.changed,
                    "carried": report.carried,
                    "readings": report.readings,
                    "failed": list(report.failed),
                    "seconds": round(report.seconds, 3),
                },
            )
        return report

    def fold_logged(self) -> None:
        """Fold the queued labels of every model if this process holds (or wins) the lease;
        a failure is logged and swallowed, like ``run_logged``'s."""
        try:
            if self._renew():
                _fold_labels(self.db, utcnow())
        except SQLAlchemyError as exc:
            log.warning("label fold failed: %s", type(exc).__name__)
        except Exception:
            log.exception("label fold failed")

    def loop(self, *, at_once: bool = False) -> None:
        """Until stopped: a refresh every ``refresh_seconds`` after the last (the first at once
        with ``at_once``), or at once after one that left models for the next cycle, and at
        even steps between them a fold of the queued labels (``FOLDS_PER_REFRESH`` steps per
        interval, the refresh's own fold included)."""
        step = self.settings.refresh_seconds / FOLDS_PER_REFRESH
        behind, steps = at_once, 0
        while not self._stop.wait(0 if behind else step):
            steps = 0 if behind else steps + 1
            if steps % FOLDS_PER_REFRESH:
                self.fold_logged()
                continue
            report = self.run_logged()
            behind, steps = report is not None and report.carried > 0, 0
