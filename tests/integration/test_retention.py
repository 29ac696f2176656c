"""Retention: ``calmon prune`` removes old rows, keeps every aggregate and audit record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from service.audit.service import verify_audit
from service.audit.store import list_events
from service.cli import main
from service.common.errors import ValidationFailed
from service.config import load_settings
from service.contracts.service import stored_contracts
from service.db.database import Database
from service.stream.retention import prune, prune_cutoff
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body

MODEL = "retained"


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.get_json()
    return response.get_json()  # type: ignore[no-any-return]


def send(client: FlaskClient, auth: Auth, prefix: str, at: datetime, n: int) -> dict[str, Any]:
    """``n`` predictions at ``at`` (one second apart), labeled an hour later."""
    predictions = [
        {
            "id": f"{prefix}{i}",
            "ts": iso(at + timedelta(seconds=i)),
            "cohort": {"region": "eu" if i % 2 else "us"},
            "logits": [1.5 - 0.1 * i, 0.2 * i, 0.0],
        }
        for i in range(n)
    ]
    accepted = ok(
        client.post(
            "/v1/predictions",
            json={"model": MODEL, "predictions": predictions},
            headers=auth.headers("ingest"),
        )
    )
    labels = [
        {"id": f"{prefix}{i}", "label": i % 3, "ts": iso(at + timedelta(hours=1, seconds=i))}
        for i in range(n)
    ]
    ok(
        client.post(
            "/v1/labels", json={"model": MODEL, "labels": labels}, headers=auth.headers("ingest")
        )
    )
    return accepted


def count(db: Database, table: str) -> int:
    with db.session() as session:
        return int(session.scalar(text(f"SELECT count(*) FROM {table}")) or 0)


@pytest.fixture
def history(client: FlaskClient, auth: Auth) -> datetime:
    """A model with 12 predictions 40 days old and 8 from the last hour, all labeled."""
    ok(client.post("/v1/contracts/fit", json=fit_body(MODEL), headers=auth.headers()))
    now = datetime.now(UTC)
    # At a 5-minute boundary, so that the old labels share one bucket per slice list and their
    # request counts them (labels of a split bucket would wait for the fold).
    old = now - timedelta(days=40)
    send(client, auth, "old", old - timedelta(seconds=old.timestamp() % 300), 12)
    send(client, auth, "new", now - timedelta(hours=3), 8)
    return now


def reading(client: FlaskClient, auth: Auth, now: datetime) -> dict[str, Any]:
    start = iso(now - timedelta(days=41)).replace(":", "%3A")
    end = iso(now).replace(":", "%3A")
    return ok(
        client.get(
            f"/v1/models/{MODEL}/calibration?start={start}&end={end}", headers=auth.headers()
        )
    )


def test_prune_removes_old_rows_and_keeps_aggregates(
    client: FlaskClient, auth: Auth, db: Database, history: datetime
) -> None:
    before = reading(client, auth, history)
    settings = load_settings({"database_url": "unused"})
    with db.session() as session:
        report = prune(
            session, older_than=timedelta(days=30), settings=settings, now=history, actor="tests"
        )
    assert report.cutoff == (history - timedelta(days=30)).replace(microsecond=0)
    assert (report.counts.predictions, report.counts.labels) == (12, 12)
    assert count(db, "predictions") == count(db, "labels") == 8

    after = reading(client, auth, history)
    assert before["n_labeled"] == 20
    assert (after["n_predictions"], after["n_labeled"]) == (20, 20)
    assert after["metrics"] == before["metrics"]
    assert after["bins"] == before["bins"]
    contracts = ok(client.get(f"/v1/contracts?model={MODEL}", headers=auth.headers()))
    assert len(contracts["contracts"]) == 1
    with db.session() as session:
        events = list_events(session, type="predictions_pruned")
        assert verify_audit(session, contracts=stored_contracts).valid is True
    assert len(events) == 1
    assert events[0].details["predictions"] == 12
    assert events[0].details["cutoff"] == report.cutoff.isoformat()


def test_prune_shorter_than_the_longest_window_is_refused(db: Database, history: datetime) -> None:
    settings = load_settings({"database_url": "unused", "windows": "1h,24h,7d"})
    with pytest.raises(ValidationFailed, match="longest window"), db.session() as session:
        prune(session, older_than=timedelta(days=6), settings=settings, now=history, actor="t")
    assert count(db, "predictions") == 20
    assert count(db, "prunes") == 0


def test_cutoff_is_the_age_before_now_to_the_second() -> None:
    settings = load_settings({"database_url": "unused", "windows": "1h"})
    now = datetime(2026, 11, 30, 7, 45, 12, 345678, tzinfo=UTC)
    assert prune_cutoff(timedelta(days=2), settings, now) == datetime(
        2026, 11, 28, 7, 45, 12, tzinfo=UTC
    )
    assert prune_cutoff(timedelta(hours=8), settings, now) == datetime(
        2026, 11, 29, 23, 45, 12, tzinfo=UTC
    )


def test_predictions_before_the_horizon_are_refused_whole(
    client: FlaskClient, auth: Auth, db: Database, history: datetime
) -> None:
    settings = load_settings({"database_url": "unused"})
    with db.session() as session:
        report = prune(
            session, older_than=timedelta(days=30), settings=settings, now=history, actor="tests"
        )
    retry = [
        {"id": "late-ok", "ts": iso(history - timedelta(days=2)), "logits": [0, 1, 0]},
        {"id": "old3", "ts": iso(history - timedelta(days=40)), "logits": [1, 0, 0]},
    ]
    response = client.post(
        "/v1/predictions",
        json={"model": MODEL, "predictions": retry},
        headers=auth.headers("ingest"),
    )
    assert response.status_code == 422
    details = response.get_json()["error"]["details"]
    assert [d["field"] for d in details] == ["predictions[1].ts"]
    assert report.cutoff.isoformat() in details[0]["message"]
    assert count(db, "predictions") == 8
    ok(
        client.post(
            "/v1/predictions",
            json={"model": MODEL, "predictions": retry[:1]},
            headers=auth.headers("ingest"),
        )
    )
    assert count(db, "predictions") == 9


def test_prune_command(
    database_url: str,
    history: datetime,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.setenv("CALMON_WINDOWS", "1h,24h,7d")
    assert main(["prune", "--older-than", "2d"]) == 2
    assert "longest window" in capsys.readouterr().err
    assert main(["prune", "--older-than", "30d"]) == 0
    out = capsys.readouterr().out
    assert "12 predictions" in out and "12 labels" in out
    assert main(["prune", "--older-than", "30days"]) == 2
