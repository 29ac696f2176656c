"""Prometheus export: gauges from stored readings, counters, the refresher and its lease."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from service import create_app
from service.config import load_settings
from service.db.database import Database
from service.export.lease_store import try_acquire
from service.export.refresher import Refresher, refresh_all
from service.stream import ingestion
from service.stream.sent_batches import SentBatch
from service.web.route_names import route_template
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
    minutes_ago,
    reading,
)


def scrape(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of one /metrics reply."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def gauge(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def settings_for(app: Flask):
    return app.config["CALMON_SETTINGS"]


def test_gauges_equal_the_api_reading_per_cohort_and_window(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = _multiclass_contract(client, auth)
    rows = _random_predictions(240, seed=11)
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:200])
    assert scrape(client).get(("calmon_ece", ())) is None
    report = refresh_all(db, settings_for(app))
    assert report.models == 1
    slices = {"all", "lang=tr", "lang=hu", "lang=id", "tier=gold", "tier=std"}
    assert report.readings == len(slices) * 3
    samples = scrape(client)
    for cohort in ("all", "lang=tr", "tier=gold"):
        api = reading(client, auth, "glyphs", f"window=24h&cohort={cohort.replace('=', ':')}")
        labels = {"model": "glyphs", "contract_version": "1", "cohort": cohort, "window": "24h"}
        assert gauge(samples, "calmon_ece", **labels) == api["metrics"]["ece"]
        assert gauge(samples, "calmon_ece_ci_lower", **labels) == api["metrics"]["ece_ci"][0]
        assert gauge(samples, "calmon_nll", **labels) == api["metrics"]["nll"]
        assert gauge(samples, "calmon_predictions", **labels) == api["n_predictions"]
        assert gauge(samples, "calmon_labeled_predictions", **labels) == api["n_labeled"]
        assert (
            gauge(samples, "calmon_refit_temperature", **labels)
            == api["drift"]["refit_temperature"]
        )
        status = {"insufficient_data": -1, "ok": 0, "warn": 1, "alert": 2}[api["drift"]["status"]]
        assert gauge(samples, "calmon_drift_status", **labels) == status
    assert (
        gauge(samples, "calmon_policy_max_ece", model="glyphs", contract_version="1")
        == contract["policy"]["max_ece"]
    )
    assert gauge(samples, "calmon_exporter_up") == 1
    series = [k for k in samples if k[0] == "calmon_ece"]
    assert len(series) == len(slices) * 3


def test_a_drift_status_change_is_an_audit_event(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    _multiclass_contract(client, auth, min_labeled=50)
    rng = np.random.default_rng(3)
    z = rng.normal(size=(300, 3)) * 1.2
    truth = [int(rng.choice(3, p=np.exp(r) / np.exp(r).sum())) for r in z]
    rows = [
        {
            "id": f"d{i}",
            "ts": minutes_ago(5),
            "cohort": {},
            "logits": (z[i] * 4).tolist(),
            "label": truth[i],
        }
        for i in range(300)
    ]
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:10])
    refresh_all(db, settings_for(app))
    _send_labels(client, auth, "glyphs", rows[10:])
    refresh_all(db, settings_for(app))
    events = client.get(
        "/v1/audit/events?model=glyphs&type=drift_status_changed", headers=auth.headers()
    ).get_json()["events"]
    changes = {(e["details"]["cohort"], e["details"]["window"]): e for e in events}
    event = changes[("all", "24h")]
    assert (event["details"]["from"], event["details"]["to"]) == ("insufficient_data", "alert")
    assert event["actor"] == "refresher"
    refresh_all(db, settings_for(app))
    again = client.get(
        "/v1/audit/events?model=glyphs&type=drift_status_changed", headers=auth.headers()
    ).get_json()["events"]
    assert len(again) == len(events)


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_use_cases_count_what_they_store(app: Flask, client: FlaskClient, auth: Auth) -> None:
    """The stream's counters are the use cases' own: a batch stored without the HTTP edge is
    counted as one sent over it."""
    _multiclass_contract(client, auth, model="direct")
    db: Database = app.extensions["calmon.database"]
    now = datetime.now(UTC)
    stored = counter("calmon_predictions_ingested_total", model="direct")
    joined = counter("calmon_labels_ingested_total", model="direct", outcome="joined")
    pending = counter("calmon_labels_ingested_total", model="direct", outcome="pending")
    delays = counter("calmon_label_delay_seconds_count", model="direct")
    ts = (now - timedelta(hours=2)).isoformat()
    preds = [{"id": f"d{i}", "ts": ts, "logits": [1.0, 0.0, 0.0]} for i in range(5)]
    labels = [{"id": f"d{i}", "label": 0, "ts": now.isoformat()} for i in range(3)]
    labels.append({"id": "waits", "label": 1, "ts": now.isoformat()})
    with db.sessions() as session:
        sent = SentBatch.of_json({"model": "direct", "predictions": preds}, "predictions")
        ingestion.ingest_predictions(db, session, sent, settings_for(app), now)
    with db.sessions() as session:
        sent = SentBatch.of_json({"model": "direct", "labels": labels}, "labels")
        ingestion.ingest_labels(db, session, sent, settings_for(app), now)
    assert counter("calmon_predictions_ingested_total", model="direct") - stored == 5
    assert counter("calmon_labels_ingested_total", model="direct", outcome="joined") - joined == 3
    assert counter("calmon_labels_ingested_total", model="direct", outcome="pending") - pending == 1
    assert counter("calmon_label_delay_seconds_count", model="direct") - delays == 3


def test_ingest_counters_and_label_delay(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth, model="counted")
    before = {
        "ingested": counter("calmon_predictions_ingested_total", model="counted"),
        "joined": counter("calmon_labels_ingested_total", model="counted", outcome="joined"),
        "pending": counter("calmon_labels_ingested_total", model="counted", outcome="pending"),
        "dup": counter("calmon_labels_ingested_total", model="counted", outcome="duplicate"),
        "delays": counter("calmon_label_delay_seconds_count", model="counted"),
        "slow": counter("calmon_label_delay_seconds_bucket", model="counted", le="3600.0"),
        "rejected": counter(
            "calmon_rejected_items_total", endpoint="/v1/predictions", reason="validation_failed"
        ),
    }
    old = datetime.now(UTC) - timedelta(hours=2)
    preds = [{"id": f"c{i}", "ts": old.isoformat(), "logits": [1.0, 0.0, 0.0]} for i in range(6)]
    client.post(
        "/v1/predictions",
        json={"model": "counted", "predictions": preds},
        headers=auth.headers("ingest"),
    )
    client.post(
        "/v1/predictions",
        json={"model": "counted", "predictions": preds},
        headers=auth.headers("ingest"),
    )
    labels = [{"id": f"c{i}", "label": 0, "ts": minutes_ago(0)} for i in range(4)]
    labels.append({"id": "later", "label": 1, "ts": minutes_ago(0)})
    client.post(
        "/v1/labels", json={"model": "counted", "labels": labels}, headers=auth.headers("ingest")
    )
    client.post(
        "/v1/labels",
        json={"model": "counted", "labels": labels[:1]},
        headers=auth.headers("ingest"),
    )
    bad = [{"id": "x", "ts": "nope", "logits": [1]}, {"id": "y", "ts": "nope", "logits": [1]}]
    response = client.post(
        "/v1/predictions",
        json={"model": "counted", "predictions": bad},
        headers=auth.headers("ingest"),
    )
    assert response.status_code == 422
    assert counter("calmon_predictions_ingested_total", model="counted") - before["ingested"] == 6
    assert (
        counter("calmon_labels_ingested_total", model="counted", outcome="joined")
        - before["joined"]
        == 4
    )
    assert (
        counter("calmon_labels_ingested_total", model="counted", outcome="pending")
        - before["pending"]
        == 1
    )
    assert (
        counter("calmon_labels_ingested_total", model="counted", outcome="duplicate")
        - before["dup"]
        == 1
    )
    assert counter("calmon_label_delay_seconds_count", model="counted") - before["delays"] == 4
    assert (
        counter("calmon_label_delay_seconds_bucket", model="counted", le="3600.0") == before["slow"]
    )
    delay_sum = counter("calmon_label_delay_seconds_sum", model="counted")
    assert delay_sum >= 4 * 7200 - 60
    assert (
        counter(
            "calmon_rejected_items_total", endpoint="/v1/predictions", reason="validation_failed"
        )
        - before["rejected"]
        == 2
    )
    samples = scrape(client)
    assert any(
        k[0] == "calmon_http_request_duration_seconds_count"
        and ("endpoint", "/v1/predictions") in k[1]
        for k in samples
    )


def test_the_lease_lets_one_refresher_work_at_a_time(db: Database) -> None:
    now = datetime.now(UTC)
    ttl = timedelta(seconds=60)

    def acquire(holder: str, at: datetime) -> bool:
        # The store never commits: like the refresher, the caller does.
        with db.session() as session:
            taken = try_acquire(session, "refresh", holder, at, ttl)
            session.commit()
            return taken

    assert acquire("a", now)
    assert not acquire("b", now + timedelta(seconds=10))
    assert acquire("a", now + timedelta(seconds=20))
    assert acquire("b", now + timedelta(seconds=81))


def test_the_background_refresher_fills_the_gauges(
    database_url: str, auth: Auth, client: FlaskClient
) -> None:
    _multiclass_contract(client, auth)
    rows = _random_predictions(30, seed=4)
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows)
    settings = load_settings(
        {
            "database_url": database_url,
            "admin_token": ADMIN_TOKEN,
            "refresh_seconds": 0.2,
            "refresh_in_service": True,
        }
    )
    served = create_app(settings)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            samples = scrape(served.test_client())
            if (
                "calmon_ece",
                (
                    ("cohort", "all"),
                    ("contract_version", "1"),
                    ("model", "glyphs"),
                    ("window", "24h"),
                ),
            ) in samples:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the background refresher did not store readings within 20 s")
        refresher: Refresher = served.extensions["calmon.refresher"]
        assert refresher.last_report is not None and refresher.last_report.models == 1
    finally:
        background: Refresher = served.extensions["calmon.refresher"]
        background.stop()
        assert not background.running
        served.extensions["calmon.database"].dispose()


def test_metrics_survive_a_database_outage() -> None:
    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none"})
    samples = scrape(app.test_client())
    assert gauge(samples, "calmon_exporter_up") == 0


def test_invented_methods_and_unknown_paths_add_no_label_values(
    app: Flask, client: FlaskClient
) -> None:
    routes = {route_template(rule) for rule in app.url_map.iter_rules()}

    def series() -> set[tuple[tuple[str, str], ...]]:
        return {
            tuple(sorted(dict(labels).items()))
            for name, labels in scrape(client)
            if name == "calmon_http_request_duration_seconds_count"
        }

    before = series()
    for method, path in [
        ("FOO", "/no/such/path"),
        ("FOO", "/v1/contracts"),
        ("X" * 200, "/healthz"),
        ("GET", "/no/such/path/either"),
        ("PROPFIND", "/metrics"),
    ]:
        assert client.open(path, method=method).status_code in (404, 405)
    # The registry is the process's: only the label values these requests added are judged.
    added = [dict(labels) for labels in series() - before]
    methods = {s["method"] for s in added}
    endpoints = {s["endpoint"] for s in added}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "OTHER"}
    assert endpoints <= routes | {"unmatched"}
    every = [dict(labels) for labels in series()]
    assert any(s["method"] == "OTHER" for s in every)
    assert any(s["endpoint"] == "unmatched" for s in every)


def test_a_route_with_a_converter_is_named_by_its_template(
    app: Flask, client: FlaskClient, auth: Auth
) -> None:
    contract = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    path = f"/v1/contracts/{contract.get_json()['id']}"
    assert client.get(path, headers=auth.headers()).status_code == 200
    endpoints = {
        dict(labels)["endpoint"]
        for name, labels in scrape(client)
        if name == "calmon_http_request_duration_seconds_count"
    }
    assert "/v1/contracts/<contract_id>" in endpoints
    assert not any(":" in e for e in endpoints), endpoints
