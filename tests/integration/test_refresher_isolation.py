"""The refresher: a failing model, exposition or maintenance step stops nothing else, and an outage
ends."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import delete, insert, update

from service.config import load_settings
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.db.models import BucketChange, CalibrationBucket, ModelRecord
from service.export.reading_store import model_readings
from service.export.refresher import Refresher, refresh_all
from service.stream.windows import HOUR, floor_to
from tests.integration.conftest import Auth, fresh_database
from tests.integration.factories import fit_body
from tests.integration.test_exporter import counter, gauge, scrape
from tests.integration.test_served import metric_samples, serving, wait_until
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
    minutes_ago,
)

CELL = {"contract_version": "1", "cohort": "all", "window": "24h"}


def poison(db: Database, model: str, contract_id: str) -> None:
    """Store a bucket whose statistics cannot be decoded (7 bytes of float64s) inside the 24h
    window of ``model``: every refresh of that model raises from then on."""
    with db.session() as session:
        session.execute(
            insert(CalibrationBucket).values(
                model=model,
                slice="all",
                resolution="1h",
                bucket_start=floor_to(datetime.now(UTC) - 3 * HOUR, HOUR),
                contract_id=contract_id,
                n_predictions=1,
                n_labeled=1,
                unlabeled_expected_correct=0.0,
                unlabeled_expected_square=0.0,
                confidence_counts=None,
                stats=b"\x00" * 7,
            )
        )
        # As every bucket write does, mark the slice changed for the refresher.
        marker = (BucketChange.model == model, BucketChange.slice == "all")
        session.execute(delete(BucketChange).where(*marker))
        session.execute(insert(BucketChange).values(model=model, slice="all", token=1))
        session.commit()


@contextmanager
def logged(name: str) -> Iterator[list[logging.LogRecord]]:
    """The records logged to ``name`` meanwhile (calmon's loggers do not propagate to root)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


@pytest.mark.slow
def test_a_poisoned_model_does_not_stop_another_models_gauges(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    _multiclass_contract(client, auth, model="healthy")
    poisoned = _multiclass_contract(client, auth, model="poisoned")
    healthy_rows = _random_predictions(60, seed=1, prefix="h")
    _send_predictions(client, auth, "healthy", healthy_rows)
    _send_labels(client, auth, "healthy", healthy_rows[:30])
    poisoned_rows = _random_predictions(20, seed=2, prefix="q")
    _send_predictions(client, auth, "poisoned", poisoned_rows)
    _send_labels(client, auth, "poisoned", poisoned_rows)
    earlier = datetime.now(UTC) - timedelta(minutes=10)
    assert refresh_all(db, settings, now=earlier).failed == ()
    before = {m: counter("calmon_refresh_failures_total", model=m) for m in ("healthy", "poisoned")}

    poison(db, "poisoned", poisoned["id"])
    _send_labels(client, auth, "healthy", healthy_rows[30:50])
    with logged("service.export.refresher") as records:
        report = refresh_all(db, settings)

    assert report.models == 2 and report.failed == ("poisoned",)
    assert counter("calmon_refresh_failures_total", model="poisoned") - before["poisoned"] == 1
    assert counter("calmon_refresh_failures_total", model="healthy") == before["healthy"]
    (failure,) = [r for r in records if r.levelno >= logging.ERROR]
    assert failure.__dict__["model"] == "poisoned" and failure.__dict__["error"] == "ValueError"
    with db.session() as session:
        healthy = model_readings(session, "healthy")
        stale = model_readings(session, "poisoned")
    assert healthy[("all", "24h")].computed_at > earlier + timedelta(minutes=9)
    assert {r.computed_at for r in stale.values()} == {earlier}

    samples = scrape(client)
    assert gauge(samples, "calmon_labeled_predictions", model="healthy", **CELL) == 50
    assert gauge(samples, "calmon_labeled_predictions", model="poisoned", **CELL) == 20
    fresh_age = gauge(samples, "calmon_readings_age_seconds", model="healthy")
    stale_age = gauge(samples, "calmon_readings_age_seconds", model="poisoned")
    assert 0 <= fresh_age < 60
    assert stale_age >= 600

    time.sleep(1.1)
    refresh_all(db, settings)
    samples = scrape(client)
    assert gauge(samples, "calmon_readings_age_seconds", model="healthy") < 60
    assert gauge(samples, "calmon_readings_age_seconds", model="poisoned") >= stale_age + 1
    assert counter("calmon_refresh_failures_total", model="poisoned") - before["poisoned"] == 2


def test_readings_age_counts_from_registration_until_a_first_refresh_succeeds(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    poisoned = _multiclass_contract(client, auth, model="born-poisoned")
    rows = _random_predictions(10, seed=3, prefix="b")
    _send_predictions(client, auth, "born-poisoned", rows)
    poison(db, "born-poisoned", poisoned["id"])
    with db.session() as session:
        session.execute(
            update(ModelRecord)
            .where(ModelRecord.name == "born-poisoned")
            .values(created_at=datetime.now(UTC) - timedelta(hours=1))
        )
        session.commit()
    assert refresh_all(db, app.config["CALMON_SETTINGS"]).failed == ("born-poisoned",)
    age = gauge(scrape(client), "calmon_readings_age_seconds", model="born-poisoned")
    assert 3600 <= age < 3700


def test_an_exposition_that_cannot_be_stored_ages_every_model(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _multiclass_contract(client, auth, model="healthy")
    settings = app.config["CALMON_SETTINGS"]
    refresh_all(db, settings, now=datetime.now(UTC) - timedelta(minutes=20))

    def broken(*_args: Any) -> None:
        raise RuntimeError("storing failed")

    monkeypatch.setattr("service.export.refresher.store_exposition", broken)
    with pytest.raises(RuntimeError):
        refresh_all(db, settings)
    # The readings were stored, but the gauges served are still the old exposition's.
    assert gauge(scrape(client), "calmon_readings_age_seconds", model="healthy") >= 1200


def test_a_failing_maintenance_step_does_not_stop_the_refresh(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _multiclass_contract(client, auth, model="healthy")

    def broken(*_args: Any) -> None:
        raise RuntimeError("no statistics today")

    monkeypatch.setattr("service.export.refresher.refresh_planner_statistics", broken)
    refresher = Refresher(db, app.config["CALMON_SETTINGS"])
    with logged("service.export.refresher") as records:
        report = refresher.run_once()
    assert report is not None and report.models == 1 and report.failed == ()
    assert any(r.__dict__.get("error") == "RuntimeError" for r in records)
    assert ("calmon_readings_age_seconds", (("model", "healthy"),)) in scrape(client)


def test_a_refresh_loop_outlives_a_database_outage() -> None:
    settings = load_settings({"database_url": "postgresql://nobody@127.0.0.1:1/none"})
    db = Database(settings.database_url)
    try:
        with logged("service.export.refresher") as records:
            assert Refresher(db, settings).run_logged() is None
        assert [r.getMessage() for r in records] == ["refresh failed: OperationalError"]
    finally:
        db.dispose()


@pytest.mark.slow
def test_refresh_failures_add_up_under_gunicorn(tmp_path: Path) -> None:
    """The refresher thread runs in a gunicorn worker: its counter reaches every worker's
    /metrics through the multiprocess files, and the ages tell the poisoned model apart."""
    with fresh_database(tmp_path, "isolated.db") as url:
        upgrade_to_head(url)
        with serving(url, tmp_path) as server:
            status, contract = server.call("POST", "/v1/contracts/fit", fit_body("poisoned"))
            assert status == 201
            assert server.call("POST", "/v1/contracts/fit", fit_body("healthy"))[0] == 201
            preds = [
                {"id": f"p{i}", "ts": minutes_ago(2), "logits": [float(i % 3), 1.0, 0.0]}
                for i in range(10)
            ]
            for model in ("poisoned", "healthy"):
                body = {"model": model, "predictions": preds}
                assert server.call("POST", "/v1/predictions", body)[0] == 200
            db = Database(url)
            try:
                poison(db, "poisoned", contract["id"])
            finally:
                db.dispose()

            def failed_twice() -> dict[Any, float] | None:
                status, body = server.call("GET", "/metrics", token=None)
                samples = metric_samples(body) if status == 200 else {}
                failures = samples.get(("calmon_refresh_failures_total", (("model", "poisoned"),)))
                return samples if failures is not None and failures >= 2 else None

            wait_until(failed_twice, 30, "two failed refreshes of the poisoned model")
            time.sleep(4)
            for _ in range(6):
                samples = metric_samples(server.call("GET", "/metrics", token=None)[1])
                assert ("calmon_refresh_failures_total", (("model", "healthy"),)) not in samples
                cell = (("cohort", "all"), ("contract_version", "1"), ("model", "healthy"))
                assert samples[("calmon_predictions", (*cell, ("window", "24h")))] == 10
                assert samples[("calmon_readings_age_seconds", (("model", "healthy"),))] < 4
                assert samples[("calmon_readings_age_seconds", (("model", "poisoned"),))] >= 4
