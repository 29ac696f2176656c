"""The periodic refresh: recompute every (model, cohort slice, window) reading and store it.

Prometheus scrapes read only the stored readings, so every worker and replica answers the same
numbers and a scrape never touches raw predictions. One refresher runs at a time: whoever holds
the ``refresh`` lease (a row with an expiry, so a crashed holder is replaced).

Each model is refreshed in its own transaction and a model whose refresh raises is skipped: it
is logged and counted (``calmon_refresh_failures_total{model}``), its previous readings stay
stored and served, and their ``calmon_readings_age_seconds`` grows, while every other model's
readings and the exposition are refreshed as usual. Maintenance steps are isolated the same way.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.audit import store as audit
from service.common.clock import utcnow
from service.config import Settings
from service.contracts import store as contracts_store
from service.db.database import Database, refresh_planner_statistics
from service.export.collector import render_readings
from service.export.instruments import REFRESH_FAILURES
from service.export.lease_store import try_acquire
from service.export.reading_store import (
    ReadingRow,
    all_readings,
    model_readings,
    replace_model_readings,
    store_exposition,
)
from service.stream import bucket_store
from service.stream.cohorts import ALL
from service.stream.ingestion import sweep_waiting_labels
from service.stream.readings import WindowReading, calibration_reading
from service.stream.retention import expire_pending
from service.stream.windows import Window

log = logging.getLogger(__name__)

STATUS_CODES = {"insufficient_data": -1, "ok": 0, "warn": 1, "alert": 2}
REFRESHER = "refresher"
#: How often the refresher refreshes the planner's statistics and expires pending labels.
MAINTAIN_EVERY = timedelta(minutes=5)


@dataclass(frozen=True)
class RefreshReport:
    """One refresh: models attempted, readings stored, wall time (s), models that failed."""

    models: int
    readings: int
    seconds: float
    failed: tuple[str, ...] = ()


def gauge_values(window_reading: WindowReading) -> dict[str, Any]:
    """The numbers the Prometheus gauges show, from a window reading (None: no value), with the
    drift status, its reasons and the contract policy's ``max_ece``: what is stored per reading."""
    metrics, drift = window_reading.reading.to_dict(), window_reading.drift.to_dict()
    ci = metrics.get("ece_ci") or [None, None]
    return {
        "ece": metrics.get("ece"),
        "ece_debiased": metrics.get("ece_debiased"),
        "ece_ci_lower": ci[0],
        "ece_ci_upper": ci[1],
        "nll": metrics.get("nll"),
        "brier": metrics.get("brier"),
        "accuracy": metrics.get("accuracy"),
        "mean_confidence": metrics.get("mean_confidence"),
        "predictions": window_reading.n_predictions,
        "labeled_predictions": window_reading.n_labeled,
        "label_coverage": window_reading.label_coverage,
        "ece_delta": drift.get("ece_delta"),
        "refit_temperature": drift.get("refit_temperature"),
        "confidence_psi": drift.get("confidence_psi"),
        "expected_accuracy": drift.get("expected_accuracy"),
        "drift_status": STATUS_CODES[drift["status"]],
        "status": drift["status"],
        "reasons": list(drift.get("reasons") or []),
        "policy_max_ece": window_reading.contract.policy.max_ece,
    }


def refresh_model(session: Session, model: str, settings: Settings, now: datetime) -> int:
    """Join stray waiting labels, recompute and store the model's readings, audit drift status
    changes; commit."""
    swept = sweep_waiting_labels(session, model)
    if swept:
        log.info("joined waiting labels", extra={"model": model, "labels": swept})
    slices = [
        ALL,
        *(name for name, _, _ in bucket_store.slice_counts(session, model) if name != ALL),
    ]
    previous = model_readings(session, model)
    rows = []
    for window_name in settings.windows:
        window = Window.trailing(window_name, now)
        for slice_ in slices:
            reading = calibration_reading(session, model, window, slice_, now)
            values = gauge_values(reading)
            contract = reading.contract
            rows.append(
                ReadingRow(model, slice_, window_name, contract.id, contract.version, now, values)
            )
            before = previous.get((slice_, window_name))
            if before is not None and before.values.get("status") != values["status"]:
                audit.append_event(
                    session,
                    type="drift_status_changed",
                    actor=REFRESHER,
                    now=now,
                    model=model,
                    contract_id=contract.id,
                    details={
                        "cohort": slice_,
                        "window": window_name,
                        "from": before.values.get("status"),
                        "to": values["status"],
                        "reasons": values["reasons"],
                    },
                )
    replace_model_readings(session, model, rows)
    session.commit()
    return len(rows)


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


def refresh_all(db: Database, settings: Settings, now: datetime | None = None) -> RefreshReport:
    """Refresh every model that has a contract, one transaction per model, then the exposition.

    A model whose refresh raises is logged, counted in ``calmon_refresh_failures_total`` and
    left with its previous readings; the others go on. Raises only if the model list or the
    exposition cannot be read or stored.
    """
    start = time.perf_counter()
    now = now or utcnow()
    with db.session() as session:
        models = contracts_store.model_names(session)
    readings = 0
    failed = []
    for model in models:
        try:
            with db.session() as session:
                readings += refresh_model(session, model, settings, now)
        except Exception as exc:
            failed.append(model)
            REFRESH_FAILURES.labels(model).inc()
            log_failure("model refresh failed", exc, model=model)
    with db.session() as session:
        store_exposition(session, render_readings(all_readings(session)), now)
        session.commit()
    return RefreshReport(len(models), readings, time.perf_counter() - start, tuple(failed))


def expire_pending_labels(db: Database, settings: Settings, now: datetime) -> int:
    """Delete every model's labels that have waited ``pending_label_days`` for their prediction,
    one transaction per model (a failing model is logged and skipped); returns how many."""
    with db.session() as session:
        models = contracts_store.model_names(session)
    total = 0
    for model in models:
        try:
            with db.session() as session:
                total += expire_pending(session, model, settings, now)
        except Exception as exc:
            log_failure("expiring pending labels failed", exc, model=model)
    return total


class Refresher:
    """A daemon thread that refreshes the stored readings every ``refresh_seconds``.

    Each service process runs one; the lease makes sure only one of them works per period.
    """

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="calmon-refresher", daemon=True)
        self.last_report: RefreshReport | None = None
        self._maintained_at: datetime | None = None

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
        ttl = timedelta(seconds=max(3 * self.settings.refresh_seconds, 60))
        with self.db.session() as session:
            acquired = try_acquire(session, "refresh", self.holder, utcnow(), ttl)
            session.commit()
            if not acquired:
                return None
        now = utcnow()
        if self._maintained_at is None or now - self._maintained_at >= MAINTAIN_EVERY:
            self.maintain(now)
            self._maintained_at = now
        self.last_report = refresh_all(self.db, self.settings)
        return self.last_report

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
                    "readings": report.readings,
                    "failed": list(report.failed),
                    "seconds": round(report.seconds, 3),
                },
            )
        return report

    def _run(self) -> None:
        while not self._stop.wait(self.settings.refresh_seconds):
            self.run_logged()
