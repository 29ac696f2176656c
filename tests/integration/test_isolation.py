"""No request breaks monitoring, nothing grows without bound.

A model whose refresh raises leaves every other model's readings fresh (in process and under
gunicorn's multiprocess metrics); cohort keys, pending labels and their age are capped.
"""

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
from sqlalchemy import insert, text, update

from service import create_app
from service.config import load_settings
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.db.models import CalibrationBucket, ModelRecord
from service.export.reading_store import model_readings
from service.export.refresher import Refresher, expire_pending_labels, refresh_all
from service.stream.retention import prune
from service.stream.windows import HOUR, floor_to
from tests.integration.conftest import ADMIN_TOKEN, Auth, _wipe, fresh_database
from tests.integration.factories import fit_body
from tests.integration.test_exporter import counter, gauge, scrape
from tests.integration.test_served import metric_samples, serving, wait_until
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
    minutes_ago,
    ok,
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
    assert {r.computed_at for r in healthy.values()} == {report_time(healthy)}
    assert report_time(healthy) > earlier + timedelta(minutes=9)
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


def report_time(readings: dict[Any, Any]) -> datetime:
    return next(iter(readings.values())).computed_at


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

    def broken(*_args: Any) -> bytes:
        raise RuntimeError("rendering failed")

    monkeypatch.setattr("service.export.refresher.render_readings", broken)
    with pytest.raises(RuntimeError):
        refresh_all(db, settings)
    # The readings were stored, but the gauges served are still the old exposition's.
    assert gauge(scrape(client), "calmon_readings_age_seconds", model="healthy") >= 1200


def test_a_failing_maintenance_step_does_not_stop_the_refresh(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _multiclass_contract(client, auth, model="healthy")

    def broken(*_args: Any) -> list[Any]:
        raise RuntimeError("no partitions today")

    monkeypatch.setattr("service.export.refresher.partitions.ensure_ahead", broken)
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


@contextmanager
def app_with(database_url: str, **settings: Any) -> Iterator[Flask]:
    """An app on the test database with ``settings``, emptied afterwards."""
    app = create_app(
        {
            "database_url": database_url,
            "admin_token": ADMIN_TOKEN,
            "refresh_in_service": False,
            **settings,
        }
    )
    try:
        yield app
    finally:
        _wipe(app.extensions["calmon.database"])
        app.extensions["calmon.database"].dispose()


HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def test_cohort_keys_beyond_the_cap_fold_into_one_slice(database_url: str) -> None:
    with app_with(database_url) as app:
        client = app.test_client()
        ok(client.post("/v1/contracts/fit", json=fit_body("keys"), headers=HEADERS))
        preds = [
            {
                "id": f"k{i}",
                "ts": minutes_ago(5),
                "cohort": {f"key{i}_{j}": "v" for j in range(8)},
                "logits": [1, 0, 0],
            }
            for i in range(40)
        ]
        body = {"model": "keys", "predictions": preds}
        assert ok(client.post("/v1/predictions", json=body, headers=HEADERS))["accepted"] == 40
        again = [{**preds[0], "id": "again", "cohort": {"key0_0": "w", "late": "x"}}]
        body = {"model": "keys", "predictions": again}
        ok(client.post("/v1/predictions", json=body, headers=HEADERS))
        slices = ok(client.get("/v1/models/keys/cohorts", headers=HEADERS))["slices"]
        counts = {s["cohort"]: s["n_predictions"] for s in slices}
        admitted = {f"key{i}_{j}=v": 1 for i in range(2) for j in range(8)}
        assert counts == {
            "all": 41,
            **admitted,
            "key0_0=w": 1,
            "__other__=__other__": 39,
        }
        refresh_all(app.extensions["calmon.database"], app.config["CALMON_SETTINGS"])
        samples = scrape(client)
        cohorts = {dict(k[1])["cohort"] for k in samples if k[0] == "calmon_predictions"}
        assert cohorts == set(counts)
        other = client.get(
            "/v1/models/keys/calibration?cohort=__other__:__other__", headers=HEADERS
        )
        assert ok(other)["n_predictions"] == 39
        reserved = [{**preds[0], "id": "reserved", "cohort": {"__other__": "x"}}]
        response = client.post(
            "/v1/predictions", json={"model": "keys", "predictions": reserved}, headers=HEADERS
        )
        assert response.status_code == 422
        assert response.get_json()["error"]["details"][0]["field"] == (
            "predictions[0].cohort.__other__"
        )


def test_a_lower_key_cap_is_the_setting(database_url: str) -> None:
    with app_with(database_url, max_cohort_keys=2) as app:
        client = app.test_client()
        ok(client.post("/v1/contracts/fit", json=fit_body("few"), headers=HEADERS))
        preds = [
            {"id": "a", "ts": minutes_ago(5), "cohort": {"b": "1", "a": "1"}, "logits": [1, 0, 0]},
            {"id": "b", "ts": minutes_ago(5), "cohort": {"c": "1", "a": "2"}, "logits": [1, 0, 0]},
        ]
        ok(
            client.post(
                "/v1/predictions", json={"model": "few", "predictions": preds}, headers=HEADERS
            )
        )
        slices = ok(client.get("/v1/models/few/cohorts", headers=HEADERS))["slices"]
        assert {s["cohort"] for s in slices} == {"all", "a=1", "b=1", "a=2", "__other__=__other__"}


def waiting_labels(db: Database, model: str) -> set[str]:
    with db.session() as session:
        return set(
            session.scalars(
                text("SELECT id FROM labels WHERE model = :model AND NOT joined"), {"model": model}
            )
        )


def test_pending_labels_beyond_the_cap_are_refused_and_reported(database_url: str) -> None:
    with app_with(database_url, max_pending_labels=5) as app:
        client, db = app.test_client(), app.extensions["calmon.database"]
        ok(client.post("/v1/contracts/fit", json=fit_body("early"), headers=HEADERS))
        preds = [{"id": f"s{i}", "ts": minutes_ago(30), "logits": [1, 0, 0]} for i in range(2)]
        ok(
            client.post(
                "/v1/predictions", json={"model": "early", "predictions": preds}, headers=HEADERS
            )
        )
        before = counter("calmon_pending_labels_rejected_total", model="early")

        def send(ids: list[str]) -> dict[str, Any]:
            labels = [{"id": i, "label": 0, "ts": minutes_ago(1)} for i in ids]
            body = {"model": "early", "labels": labels}
            return ok(client.post("/v1/labels", json=body, headers=HEADERS))

        first = send(["w1", "w2", "w3", "w4"])
        assert (first["pending"], first["rejected_pending"]) == (4, 0)
        second = send(["w7", "w5", "w6", "s0", "s1"])
        assert second["joined"] == 2
        assert (second["pending"], second["rejected_pending"]) == (1, 2)
        assert second["rejected_pending_ids"] == ["w6", "w7"]
        assert waiting_labels(db, "early") == {"w1", "w2", "w3", "w4", "w5"}
        assert counter("calmon_pending_labels_rejected_total", model="early") - before == 2
        # The refused labels were not stored: once their predictions are in, they join.
        preds = [{"id": i, "ts": minutes_ago(30), "logits": [1, 0, 0]} for i in ("w6", "w7")]
        ok(
            client.post(
                "/v1/predictions", json={"model": "early", "predictions": preds}, headers=HEADERS
            )
        )
        assert send(["w6", "w7"])["joined"] == 2
        assert send(["w8"])["rejected_pending"] == 1


def test_pending_labels_expire_in_the_refresher_and_in_prune(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A month ahead, maintenance would also create that month's partitions in the shared database.
    monkeypatch.setattr("service.export.refresher.partitions.ensure_ahead", lambda *_args: [])
    with app_with(database_url, pending_label_days=30) as app:
        client, db = app.test_client(), app.extensions["calmon.database"]
        settings = app.config["CALMON_SETTINGS"]
        ok(client.post("/v1/contracts/fit", json=fit_body("stale"), headers=HEADERS))
        preds = [{"id": "s0", "ts": minutes_ago(30), "logits": [1, 0, 0]}]
        ok(
            client.post(
                "/v1/predictions", json={"model": "stale", "predictions": preds}, headers=HEADERS
            )
        )
        labels = [{"id": i, "label": 0, "ts": minutes_ago(1)} for i in ("s0", "w1", "w2", "w3")]
        received = datetime.now(UTC)
        reply = ok(
            client.post("/v1/labels", json={"model": "stale", "labels": labels}, headers=HEADERS)
        )
        assert (reply["joined"], reply["pending"]) == (1, 3)
        before = counter("calmon_pending_labels_expired_total", model="stale")

        assert expire_pending_labels(db, settings, received + timedelta(days=29)) == 0
        assert waiting_labels(db, "stale") == {"w1", "w2", "w3"}
        Refresher(db, settings).maintain(received + timedelta(days=30, minutes=1))
        assert waiting_labels(db, "stale") == set()
        assert counter("calmon_pending_labels_expired_total", model="stale") - before == 3
        with db.session() as session:
            joined = session.scalar(text("SELECT count(*) FROM labels WHERE model = 'stale'"))
        assert joined == 1

        labels = [{"id": i, "label": 0, "ts": minutes_ago(1)} for i in ("w4", "w5")]
        ok(client.post("/v1/labels", json={"model": "stale", "labels": labels}, headers=HEADERS))
        with db.session() as session:
            report = prune(
                session,
                older_than=timedelta(days=400),
                settings=settings,
                now=datetime.now(UTC) + timedelta(days=31),
                actor="tests",
            )
        assert report.pending_expired == {"stale": 2}
        assert waiting_labels(db, "stale") == set()
        assert counter("calmon_pending_labels_expired_total", model="stale") - before == 5


def test_the_new_settings_come_from_the_environment() -> None:
    settings = load_settings(
        environ={
            "CALMON_MAX_COHORT_KEYS": "4",
            "CALMON_MAX_PENDING_LABELS": "1000",
            "CALMON_PENDING_LABEL_DAYS": "7",
        }
    )
    assert (settings.max_cohort_keys, settings.max_pending_labels) == (4, 1000)
    assert settings.pending_label_days == 7
    defaults = load_settings(environ={})
    assert (defaults.max_cohort_keys, defaults.max_pending_labels) == (16, 1_000_000)
    assert defaults.pending_label_days == 30
    for name in (
        "CALMON_MAX_COHORT_KEYS",
        "CALMON_MAX_PENDING_LABELS",
        "CALMON_PENDING_LABEL_DAYS",
    ):
        with pytest.raises(ValueError, match=name):
            load_settings(environ={name: "0"})
