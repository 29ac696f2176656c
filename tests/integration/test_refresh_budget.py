"""A refresh cycle has a time budget: it takes the models longest behind first (those with new
data first among equals), leaves the others for the next cycle, which the refresher starts at
once, and stores the exposition meanwhile, so no model's age waits for the whole fleet; a model
without data gets its readings for one contract read, and every reading equals a rebuild."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from service.db.database import Database
from service.db.models import BucketChange, ContractRecord, ModelRecord, RefreshState
from service.export import refresher as refresher_module
from service.export.model_refresh import gauge_values
from service.export.plan import ModelWork
from service.export.reading_store import all_readings
from service.export.refresher import Refresher, refresh_all
from service.stream.monitoring import calibration_reading
from service.stream.windows import Window
from tests.integration.conftest import Auth
from tests.integration.factories import binary_fit_body
from tests.integration.test_exporter import gauge, scrape
from tests.integration.test_incremental_refresh import counted_statements
from tests.integration.test_stream import (
    _multiclass_contract,
    _send_labels,
    _send_predictions,
    iso,
    ok,
    post,
)


class ModelClock:
    """A monotonic clock for the refresher's budget that stands still but while models are
    refreshed: each model refreshed takes ``per_model`` seconds on it. Records the models in the
    order refreshed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, per_model: float) -> None:
        self.now = 0.0
        self.order: list[str] = []
        one, together = refresher_module.refresh_model, refresher_module.refresh_without_data

        def refresh_model(db: Database, work: ModelWork, *args: Any) -> Any:
            self.order.append(work.model)
            self.now += per_model
            return one(db, work, *args)

        def refresh_without_data(db: Database, works: list[ModelWork], *args: Any) -> Any:
            done, alone = together(db, works, *args)
            self.order.extend(done)
            self.now += per_model * len(done)
            return done, alone

        monkeypatch.setattr(refresher_module, "refresh_model", refresh_model)
        monkeypatch.setattr(refresher_module, "refresh_without_data", refresh_without_data)

    def __call__(self) -> float:
        return self.now

    def taken(self) -> list[str]:
        """The models refreshed since the last call, in order."""
        out, self.order = self.order, []
        return out


def rows_at(ts: datetime, n: int, prefix: str) -> list[dict[str, Any]]:
    """``n`` labeled predictions without cohort keys at ``ts``."""
    return [
        {
            "id": f"{prefix}{i}",
            "ts": iso(ts),
            "cohort": {},
            "logits": [1.0 + i % 3, 0.5, 0.0],
            "label": i % 3,
        }
        for i in range(n)
    ]


def stream(client: FlaskClient, auth: Auth, model: str, ts: datetime, prefix: str) -> None:
    rows = rows_at(ts, 12, f"{model}-{prefix}-")
    _send_predictions(client, auth, model, rows)
    _send_labels(client, auth, model, rows)


def registered_at(db: Database, model: str, at: datetime) -> None:
    """Date the registration of ``model`` back to ``at``."""
    with db.session() as session:
        session.execute(update(ModelRecord).where(ModelRecord.name == model).values(created_at=at))
        session.commit()


def assert_readings_equal_a_rebuild(db: Database) -> None:
    """Every stored reading equals the reading computed afresh at its time from the buckets."""
    with db.read_session() as session:
        stored = all_readings(session)
        assert stored
        for row in stored:
            window = Window.trailing(row.window, row.computed_at)
            fresh = calibration_reading(session, row.model, window, row.cohort, row.computed_at)
            assert (fresh.contract.id, gauge_values(fresh)) == (row.contract_id, row.values)


def test_a_cycle_stops_at_its_budget_and_the_next_takes_the_longest_behind_first(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    real = datetime.now(UTC)
    # Cycles in the past (their data older still, so no window edge passes it meanwhile).
    t0, t1, t2, t3 = (real - timedelta(minutes=m) for m in (20, 15, 10, 5))
    data = real - timedelta(minutes=50)
    for model in ("a", "b", "c", "d"):
        _multiclass_contract(client, auth, model=model)
        stream(client, auth, model, data, "first")
    assert refresh_all(db, settings, now=t0).carried == 0
    for model in ("b", "c", "d"):
        stream(client, auth, model, data, "second")
    _multiclass_contract(client, auth, model="late")
    registered_at(db, "late", t0 + timedelta(minutes=1))
    clock = ModelClock(monkeypatch, per_model=1.0)

    # Every model with work was current at t0: those with new data go first, then the new one.
    first = refresh_all(db, settings, now=t1, budget=2.0, clock=clock)
    assert clock.taken() == ["b", "c"]
    assert (first.changed, first.carried) == (4, 2)
    with db.read_session() as session:
        marked = set(session.scalars(select(BucketChange.model)))
        refreshed = set(session.scalars(select(RefreshState.model)))
        counts = {
            r.model: r.values["labeled_predictions"]
            for r in all_readings(session)
            if (r.cohort, r.window) == ("all", "24h")
        }
    assert marked == {"d"} and "late" not in refreshed
    assert counts == {"a": 12, "b": 24, "c": 24, "d": 12}
    samples = scrape(client)
    age = {m: gauge(samples, "calmon_readings_age_seconds", model=m) for m in "abcd"}
    age["late"] = gauge(samples, "calmon_readings_age_seconds", model="late")
    # Found current at t1 (a had nothing to do), left over from t0, registered at t0 + 1 min.
    assert all(900 <= age[m] < 960 for m in "abc")
    assert 1200 <= age["d"] < 1260 and 1140 <= age["late"] < 1200

    # d and late were left behind at t0: they go before b, whose new data came after t1.
    stream(client, auth, "b", data, "third")
    second = refresh_all(db, settings, now=t2, budget=2.0, clock=clock)
    assert clock.taken() == ["d", "late"] and second.carried == 1
    third = refresh_all(db, settings, now=t3, budget=2.0, clock=clock)
    assert clock.taken() == ["b"] and third.carried == 0
    samples = scrape(client)
    assert gauge(samples, "calmon_labeled_predictions", **cell("b")) == 36
    assert gauge(samples, "calmon_labeled_predictions", **cell("d")) == 24
    assert gauge(samples, "calmon_drift_status", **cell("late")) == -1
    assert_readings_equal_a_rebuild(db)


def cell(model: str, contract_version: str = "1") -> dict[str, str]:
    return {"model": model, "contract_version": contract_version, "cohort": "all", "window": "24h"}


def test_models_without_data_are_refreshed_together_in_a_fixed_number_of_statements(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    _multiclass_contract(client, auth, model="glyphs")
    ok(post(client, auth, "/v1/contracts/fit", binary_fit_body("churn"), role="admin"))
    with counted_statements(db) as statements:
        report = refresh_all(db, settings)
    assert (report.changed, report.readings) == (2, 2 * len(settings.windows))
    # One probe of the buckets for both: no window's buckets are read.
    assert len([s for s in statements if "calibration_buckets" in s]) == 1
    assert_readings_equal_a_rebuild(db)
    counts = []
    for more in (["more-1", "more-2"], ["more-3", "more-4", "more-5"]):
        for model in more:
            _multiclass_contract(client, auth, model=model)
        with counted_statements(db) as statements:
            assert refresh_all(db, settings).changed == len(more)
        counts.append(len(statements))
    assert counts[0] == counts[1]
    samples = scrape(client)
    for model in ("glyphs", "churn"):
        for window in settings.windows:
            labels = {**cell(model), "window": window}
            assert gauge(samples, "calmon_drift_status", **labels) == -1
            assert gauge(samples, "calmon_predictions", **labels) == 0
    # A new contract version of a model still without data: measured against it.
    _multiclass_contract(client, auth, model="glyphs")
    assert refresh_all(db, settings).changed == 1
    assert_readings_equal_a_rebuild(db)
    assert gauge(scrape(client), "calmon_policy_max_ece", model="glyphs", contract_version="2")


def test_the_refresher_starts_the_next_cycle_at_once_while_models_are_left(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = [f"m{i}" for i in range(5)]
    for model in models:
        _multiclass_contract(client, auth, model=model)
        stream(client, auth, model, datetime.now(UTC) - timedelta(minutes=20), "m")
    # An hour between cycles and a budget of 1,200 s, in which two models of 1,000 s fit.
    settings = replace(app.config["CALMON_SETTINGS"], refresh_seconds=3600.0)
    clock = ModelClock(monkeypatch, per_model=1000.0)
    refresher = Refresher(db, settings, clock=clock)
    assert refresher.budget == 1200.0
    loop = threading.Thread(target=refresher.loop, kwargs={"at_once": True}, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 60
        while len(clock.order) < len(models) and time.monotonic() < deadline:
            time.sleep(0.05)
        while refresher.last_report is None or refresher.last_report.carried:
            assert time.monotonic() < deadline, "the refresher waited between cycles"
            time.sleep(0.05)
    finally:
        refresher.stop()
    assert clock.order == models
    with db.read_session() as session:
        assert set(session.scalars(select(RefreshState.model))) == set(models)
    assert refresher.last_report.carried == 0 and refresher.last_report.changed == 1


def test_a_run_of_models_without_data_hands_back_those_with_data_and_isolates_a_failure(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    for model in ("quiet", "busy"):
        _multiclass_contract(client, auth, model=model)
    stream(client, auth, "busy", datetime.now(UTC) - timedelta(minutes=20), "a")
    refresh_all(db, settings)
    # New contract versions: both recomputed in full without markers, one of them with data.
    for model in ("quiet", "busy"):
        _multiclass_contract(client, auth, model=model)
    report = refresh_all(db, settings)
    assert (report.changed, report.readings, report.failed) == (2, 6, ())
    samples = scrape(client)
    # Its window holds only data of version 1: measured against that.
    assert gauge(samples, "calmon_labeled_predictions", **cell("busy")) == 12
    assert gauge(samples, "calmon_predictions", **cell("quiet", "2")) == 0

    # A contract that cannot be read back fails its model's refresh alone.
    for model in ("new-1", "broken", "new-2"):
        _multiclass_contract(client, auth, model=model)
    with db.session() as session:
        session.execute(
            update(ContractRecord).where(ContractRecord.model == "broken").values(bin_edges="oops")
        )
        session.commit()
    report = refresh_all(db, settings)
    assert (report.changed, report.failed) == (3, ("broken",))
    samples = scrape(client)
    for model in ("new-1", "new-2"):
        assert gauge(samples, "calmon_drift_status", **cell(model)) == -1
    assert ("calmon_drift_status", tuple(sorted(cell("broken").items()))) not in samples
    assert gauge(samples, "calmon_readings_age_seconds", model="broken") >= 0
    assert_readings_equal_a_rebuild(db)
