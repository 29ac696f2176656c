"""Nothing grows without bound: cohort keys and values, and labels waiting for their prediction,
are capped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import text

from service import create_app
from service.config import load_settings
from service.db.database import Database
from service.export.refresher import Refresher, expire_pending_labels, refresh_all
from service.stream.retention import prune
from tests.integration.conftest import ADMIN_TOKEN, wipe
from tests.integration.factories import fit_body
from tests.integration.test_exporter import counter, scrape
from tests.integration.test_stream import (
    minutes_ago,
    ok,
)


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
        wipe(app.extensions["calmon.database"])
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
