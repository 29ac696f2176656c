"""The refresh scales with the fleet's changes: only changed readings are recomputed, a window
edge passing data is noticed without writes, an unchanged fleet costs a fixed number of
statements, a model's series are budgeted, /metrics serves the stored exposition, the fleet page
paginates, and a refresh holds no write lock while it computes."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event

from service.config import Settings
from service.db.database import Database
from service.export import model_refresh, reading_store
from service.export import refresher as refresher_module
from service.export.reading_store import model_readings
from service.export.refresher import refresh_all
from service.stream.windows import FINE, floor_to
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body
from tests.integration.test_exporter import gauge, scrape
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
    iso,
    ok,
    post,
    reading,
)


def settings_of(app: Flask, **changes: Any) -> Settings:
    return replace(app.config["CALMON_SETTINGS"], **changes)


@contextmanager
def counted_statements(db: Database) -> Iterator[list[str]]:
    """The SQL statements ``db`` runs meanwhile (SQLite's explicit BEGINs aside)."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):
            statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def recent_rows(n: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    """Predictions 10 to 30 minutes old: inside every default window, away from its edges."""
    rows = _random_predictions(n, seed=seed, prefix=prefix)
    now = datetime.now(UTC)
    for i, row in enumerate(rows):
        row["ts"] = iso(now - timedelta(minutes=10 + i % 20))
    return rows


def test_a_refresh_after_a_change_rewrites_only_the_changed_models_readings(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    rows = {m: recent_rows(60, seed=i, prefix=m) for i, m in enumerate(("changed", "quiet"))}
    for model, sent in rows.items():
        _multiclass_contract(client, auth, model=model)
        _send_predictions(client, auth, model, sent)
        _send_labels(client, auth, model, sent[:20])
    now = datetime.now(UTC)
    first = refresh_all(db, settings, now=now)
    assert first.readings == 2 * 6 * 3 and first.changed == 2
    with db.session() as session:
        quiet_before = model_readings(session, "quiet")

    # Labels of the tier=gold predictions only: slices all, tier=gold and their lang=...
    gold = [r for r in rows["changed"][20:] if r["cohort"]["tier"] == "gold"]
    _send_labels(client, auth, "changed", gold)
    touched = {"all", "tier=gold"} | {f"lang={r['cohort']['lang']}" for r in gold}
    later = now + timedelta(seconds=1)
    second = refresh_all(db, settings, now=later)

    assert second.changed == 1 and second.readings == len(touched) * 3
    with db.session() as session:
        changed = model_readings(session, "changed")
        assert model_readings(session, "quiet") == quiet_before
    rewritten = {key for key, r in changed.items() if r.computed_at == later}
    assert rewritten == {(s, w) for s in touched for w in settings.windows}
    samples = scrape(client)
    cell = {"contract_version": "1", "cohort": "all", "window": "24h"}
    assert gauge(samples, "calmon_labeled_predictions", model="changed", **cell) == 20 + len(gold)
    assert gauge(samples, "calmon_labeled_predictions", model="quiet", **cell) == 20


def test_a_reading_whose_window_start_passed_a_data_bucket_is_refreshed_without_writes(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    _multiclass_contract(client, auth, model="edges")
    now = datetime.now(UTC)
    rows = _random_predictions(12, seed=5, prefix="e")
    for row in rows:
        row["ts"] = iso(now - timedelta(minutes=50))
    _send_predictions(client, auth, "edges", rows)
    refresh_all(db, settings, now=now)
    with db.session() as session:
        before = model_readings(session, "edges")
    assert before[("all", "1h")].values["predictions"] == 12

    # Nothing written; 15 minutes on, the 1h window's start has passed the bucket.
    later = now + timedelta(minutes=15)
    report = refresh_all(db, settings, now=later)
    with db.session() as session:
        after = model_readings(session, "edges")
    slices = {cohort for cohort, _ in before}
    assert report.readings == len(slices)
    assert {k for k, r in after.items() if r.computed_at == later} == {(s, "1h") for s in slices}
    assert after[("all", "1h")].values["predictions"] == 0
    assert after[("all", "24h")] == before[("all", "24h")]
    samples = scrape(client)
    cell = {"model": "edges", "contract_version": "1", "cohort": "all"}
    assert gauge(samples, "calmon_predictions", window="1h", **cell) == 0
    assert gauge(samples, "calmon_predictions", window="24h", **cell) == 12


def test_a_reading_whose_window_end_reached_a_data_bucket_is_refreshed_without_writes(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    _multiclass_contract(client, auth, model="ahead")
    _multiclass_contract(client, auth, model="still")
    _send_predictions(client, auth, "still", recent_rows(5, seed=7, prefix="s"))
    now = datetime.now(UTC)
    rows = _random_predictions(7, seed=6, prefix="a")
    ahead = floor_to(now, FINE) + 4 * FINE
    for row in rows:
        row["ts"] = iso(ahead + timedelta(seconds=30))
    _send_predictions(client, auth, "ahead", rows)
    refresh_all(db, settings, now=now)
    with db.session() as session:
        assert model_readings(session, "ahead")[("all", "1h")].values["predictions"] == 0

    with db.session() as session:
        still = model_readings(session, "still")
    report = refresh_all(db, settings, now=ahead + timedelta(seconds=1))
    with db.session() as session:
        readings = model_readings(session, "ahead")
        assert model_readings(session, "still") == still
    assert report.changed == 1 and report.readings == len(readings)
    assert {w: readings[("all", w)].values["predictions"] for w in settings.windows} == {
        w: 7 for w in settings.windows
    }


def test_an_unchanged_fleet_refresh_does_no_per_model_work(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    now = datetime.now(UTC)
    fleet: list[int] = []

    def unchanged_refresh_statements(models: int) -> list[str]:
        for i in range(len(fleet), models):
            fleet.append(i)
            model = f"fleet-{i}"
            _multiclass_contract(client, auth, model=model)
            _send_predictions(client, auth, model, recent_rows(6, seed=i, prefix=model))
        refresh_all(db, settings, now=now)
        with counted_statements(db) as statements:
            report = refresh_all(db, settings, now=now + timedelta(seconds=1))
        assert report.models == models and report.changed == 0 and report.readings == 0
        return statements

    small = unchanged_refresh_statements(2)
    large = unchanged_refresh_statements(8)
    assert len(large) == len(small)
    assert not any("calibration_buckets" in s for s in large)


def test_the_series_budget_limits_exported_series_and_says_so(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = settings_of(app, max_slices_per_model=3)
    _multiclass_contract(client, auth, model="wide")
    rows = recent_rows(90, seed=8, prefix="w")
    _send_predictions(client, auth, "wide", rows)
    # Labeled: tier=std 72, lang=* 30 each, tier=gold 18.
    _send_labels(client, auth, "wide", rows)
    refresh_all(db, settings)

    samples = scrape(client)
    exported = {dict(labels)["cohort"] for name, labels in samples if name == "calmon_predictions"}
    assert exported == {"all", "tier=std", "lang=hu"}
    assert gauge(samples, "calmon_slices_unexported", model="wide") == 3
    body = client.get("/metrics").get_data(as_text=True)
    assert re.search(r"# HELP calmon_slices_unexported .*CALMON_MAX_SLICES_PER_MODEL", body)
    # An unexported slice is still read through the API.
    assert reading(client, auth, "wide", "window=24h&cohort=tier:gold")["n_labeled"] == 18
    page = client.get("/ui/models/wide", headers=auth.headers()).get_data(as_text=True)
    assert "3 slices exported" in page and "3 not exported" in page
    assert re.search(r'data-cohort="tier=gold">.*?not exported', page)


def test_metrics_serves_the_stored_exposition_in_one_statement(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    for i in range(3):
        _multiclass_contract(client, auth, model=f"served-{i}")
    refresh_all(db, app.config["CALMON_SETTINGS"])
    stored_at = datetime.now(UTC) - timedelta(minutes=2)
    behind = stored_at - timedelta(hours=1)
    body = b'# TYPE calmon_ece gauge\ncalmon_ece{model="stored",cohort="all"} 0.25\n'
    with db.session() as session:
        times = reading_store.ExpositionTimes(
            stored_at, ("served-0", "served-1"), {"served-1": behind.timestamp()}
        )
        reading_store.store_exposition(session, body, stored_at, times)
        session.commit()

    with counted_statements(db) as first_statements:
        scrape(client)
    with counted_statements(db) as statements:
        samples = scrape(client)
    # The new text is read whole once; then only its digest and times, in one statement, beside
    # the one that reads the label fold's status.
    exposition = [s for s in first_statements + statements if "stored_expositions" in s]
    folds = [s for s in first_statements + statements if "unfolded_label_batches" in s]
    assert len(exposition) + len(folds) == len(first_statements) + len(statements)
    assert len(first_statements) <= 3 and len(statements) == 2 and len(folds) == 2
    assert gauge(samples, "calmon_ece", model="stored", cohort="all") == 0.25
    assert not any(
        name == "calmon_ece" and ("model", "served-0") in labels for name, labels in samples
    )
    assert 120 <= gauge(samples, "calmon_readings_age_seconds", model="served-0") < 180
    assert 3720 <= gauge(samples, "calmon_readings_age_seconds", model="served-1") < 3780


def test_a_scrape_during_a_refresh_sees_the_previous_exposition_whole(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: Any
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    for model in ("first", "second"):
        _multiclass_contract(client, auth, model=model)
        _send_predictions(client, auth, model, recent_rows(10, seed=1, prefix=model))
    refresh_all(db, settings)
    for model in ("first", "second"):
        _send_predictions(client, auth, model, recent_rows(5, seed=2, prefix=f"{model}-more"))
    midway: list[dict[Any, float]] = []
    counts: list[int] = []
    original = refresher_module.refresh_model

    def scraping(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        with counted_statements(db) as statements:
            midway.append(scrape(client))
        counts.append(len(statements))
        assert [s for s in statements if "unfolded_label_batches" in s][1:] == []
        assert all("stored_expositions" in s or "unfolded_label_batches" in s for s in statements)
        return done

    monkeypatch.setattr(refresher_module, "refresh_model", scraping)
    scrape(client)  # this process has read the stored text: midway it reads only its digest
    assert refresh_all(db, settings).failed == ()
    assert counts == [2, 2]
    cell = {"contract_version": "1", "cohort": "all", "window": "24h"}
    for samples in midway:
        assert gauge(samples, "calmon_predictions", model="first", **cell) == 10
        assert gauge(samples, "calmon_predictions", model="second", **cell) == 10
    after = scrape(client)
    assert gauge(after, "calmon_predictions", model="first", **cell) == 15
    assert gauge(after, "calmon_predictions", model="second", **cell) == 15


@pytest.mark.slow
def test_the_fleet_page_paginates_worst_first(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    for i in range(52):
        ok(post(client, auth, "/v1/contracts/fit", fit_body(f"m{i:02d}"), role="admin"))
    _multiclass_contract(client, auth, model="zz-noisy", min_labeled=50)
    # Over-confident predictions (logits 4x too sharp): the model goes to alert.
    rng = np.random.default_rng(3)
    z = rng.normal(size=(300, 3)) * 1.2
    rows = [
        {
            "id": f"n{i}",
            "ts": iso(datetime.now(UTC) - timedelta(minutes=5)),
            "cohort": {},
            "logits": (z[i] * 4).tolist(),
            "label": int(rng.choice(3, p=np.exp(z[i]) / np.exp(z[i]).sum())),
        }
        for i in range(300)
    ]
    _send_predictions(client, auth, "zz-noisy", rows)
    _send_labels(client, auth, "zz-noisy", rows)
    refresh_all(db, app.config["CALMON_SETTINGS"])
    assert reading(client, auth, "zz-noisy")["drift"]["status"] == "alert"

    def models_on(query: str) -> tuple[str, list[str]]:
        response = client.get(f"/ui{query}", headers=auth.headers())
        assert response.status_code == 200
        page = response.get_data(as_text=True)
        return page, re.findall(r'<tbody class="fleet-model" data-model="([^"]+)"', page)

    page, first = models_on("")
    assert len(first) == 50 and first[0] == "zz-noisy"
    assert first[1:] == [f"m{i:02d}" for i in range(49)]
    assert "53 models" in page and "1 in alert" in page and "page 1 of 2" in page
    assert 'href="/ui?page=2"' in page
    page, second = models_on("?page=2")
    assert second == ["m49", "m50", "m51"]
    assert 'href="/ui?page=1"' in page
    assert client.get("/ui?page=0", headers=auth.headers()).status_code == 422


def test_writes_go_on_while_the_refresher_computes_readings(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: Any
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    _multiclass_contract(client, auth, model="busy")
    _send_predictions(client, auth, "busy", recent_rows(10, seed=4, prefix="b"))
    entered, release = threading.Event(), threading.Event()
    original = model_refresh.calibration_readings

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(model_refresh, "calibration_readings", slow)
    worker = threading.Thread(target=refresh_all, args=(db, settings))
    worker.start()
    try:
        assert entered.wait(30)
        response = post(
            client,
            auth,
            "/v1/predictions",
            {
                "model": "busy",
                "predictions": [
                    {"id": "meanwhile", "ts": iso(datetime.now(UTC)), "logits": [1, 0, 0]}
                ],
            },
        )
        assert response.status_code == 200
    finally:
        release.set()
        worker.join(60)
