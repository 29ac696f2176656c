"""Predictions in one table keyed by (model, id): retries, conflicts, retention by event time,
and revision 0009 (its upgrade and its downgrade to the partitioned layout with digests)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from alembic import command
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Connection, bindparam, text

from service import create_app
from service.db.database import Database, make_engine
from service.db.migrate import alembic_config
from service.db.types import UTCDateTime
from service.stream.retention_store import prune_before
from tests.integration.conftest import ADMIN_TOKEN, BACKEND, Auth
from tests.integration.factories import fit_body

MODEL = "rows"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
TS = bindparam("ts", type_=UTCDateTime())


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def old_digest(ts: datetime, cohort: dict[str, str], logits: list[float]) -> bytes:
    """The content digest as revision 0006 defined it: SHA-256 of ``ts.isoformat()`` (UTC), the
    cohort's canonical JSON (sorted keys, no whitespace) and the little-endian float64 bytes."""
    canonical = json.dumps(cohort, sort_keys=True, separators=(",", ":")).encode()
    values = np.asarray(logits, dtype="<f8").tobytes()
    return hashlib.sha256(
        ts.astimezone(UTC).isoformat().encode() + b"|" + canonical + b"|" + values
    ).digest()


def stored(db: Database) -> list[tuple[Any, ...]]:
    """Every stored prediction, comparable across backends."""
    with db.session() as session:
        rows = session.execute(
            text(
                "SELECT model, id, ts, contract_id, CAST(cohort AS TEXT), slices, inputs"
                " FROM predictions ORDER BY model, id"
            ).columns(ts=UTCDateTime())
        ).all()
    return [(*r[:6], bytes(r[6])) for r in rows]


def buckets(db: Database) -> list[tuple[Any, ...]]:
    with db.session() as session:
        rows = session.execute(
            text(
                "SELECT slice, resolution, contract_id, n_predictions, n_labeled"
                " FROM calibration_buckets ORDER BY 1, 2, 3"
            )
        ).all()
    return [tuple(r) for r in rows]


def post_predictions(client: FlaskClient, auth: Auth, items: list[dict[str, Any]]) -> Any:
    return client.post(
        "/v1/predictions",
        json={"model": MODEL, "predictions": items},
        headers=auth.headers("ingest"),
    )


def items(at: datetime, prefix: str = "p", n: int = 6) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{i}",
            "ts": iso(at + timedelta(seconds=i, microseconds=123)),
            "cohort": {"region": "zürich" if i % 2 else "us", "tier": str(i % 3)},
            "logits": [1.5 - 0.1 * i, 0.2 * i, 0.0],
        }
        for i in range(n)
    ]


@pytest.fixture
def fitted(client: FlaskClient, auth: Auth) -> datetime:
    response = client.post("/v1/contracts/fit", json=fit_body(MODEL), headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def test_a_resent_batch_is_all_duplicates_and_changes_nothing(
    client: FlaskClient, auth: Auth, db: Database, fitted: datetime
) -> None:
    batch = items(fitted)
    first = post_predictions(client, auth, batch)
    assert first.status_code == 200 and first.get_json()["accepted"] == 6
    before, counted = stored(db), buckets(db)
    # Key order in a cohort does not make it another cohort.
    resent = [{**i, "cohort": dict(reversed(list(i["cohort"].items())))} for i in batch]
    again = post_predictions(client, auth, resent)
    assert again.status_code == 200
    assert (again.get_json()["accepted"], again.get_json()["duplicates"]) == (0, 6)
    assert stored(db) == before
    assert buckets(db) == counted
    assert len(before) == 6


@pytest.mark.parametrize(
    "change",
    [
        {"ts": "shifted"},
        {"cohort": {"region": "us", "tier": "9"}},
        {"logits": [1.5, 0.0, 1e-12]},
    ],
    ids=["ts", "cohort", "inputs"],
)
def test_a_resent_id_with_other_content_is_a_conflict_and_nothing_is_written(
    client: FlaskClient, auth: Auth, db: Database, fitted: datetime, change: dict[str, Any]
) -> None:
    batch = items(fitted)
    assert post_predictions(client, auth, batch).status_code == 200
    before, counted = stored(db), buckets(db)
    changed = dict(batch[0])
    changed.update(change)
    if change.get("ts") == "shifted":
        changed["ts"] = iso(fitted + timedelta(microseconds=124))
    retry = [*items(fitted, prefix="new", n=2), batch[1], changed]
    response = post_predictions(client, auth, retry)
    assert response.status_code == 409, response.get_json()
    details = response.get_json()["error"]["details"]
    assert [(d["field"], d["item"]) for d in details] == [("predictions[3].id", 3)]
    assert stored(db) == before
    assert buckets(db) == counted


def test_labels_join_their_prediction_by_id(
    client: FlaskClient, auth: Auth, db: Database, fitted: datetime
) -> None:
    assert post_predictions(client, auth, items(fitted, n=3)).status_code == 200
    labels = [
        {"id": "p0", "label": 0, "ts": iso(fitted + timedelta(hours=1))},
        {"id": "early", "label": 1, "ts": iso(fitted + timedelta(hours=1))},
    ]
    response = client.post(
        "/v1/labels", json={"model": MODEL, "labels": labels}, headers=auth.headers("ingest")
    )
    assert (response.get_json()["joined"], response.get_json()["pending"]) == (1, 1)
    late = [{"id": "early", "ts": iso(fitted), "cohort": {}, "logits": [0, 1, 0]}]
    accepted = post_predictions(client, auth, late).get_json()
    assert (accepted["accepted"], accepted["joined_pending_labels"]) == (1, 1)
    with db.session() as session:
        assert session.scalar(text("SELECT count(*) FROM labels WHERE joined")) == 2


def test_prune_deletes_by_event_time_and_keeps_newer_rows(
    client: FlaskClient, auth: Auth, db: Database, fitted: datetime
) -> None:
    old = fitted - timedelta(days=20)
    assert post_predictions(client, auth, items(old, prefix="old")).status_code == 200
    assert post_predictions(client, auth, items(fitted, prefix="new")).status_code == 200
    cutoff = old + timedelta(seconds=3)
    labels = [
        {"id": f"old{i}", "label": 0, "ts": iso(old + timedelta(seconds=2 * i + 0.5))}
        for i in range(6)
    ]
    client.post(
        "/v1/labels", json={"model": MODEL, "labels": labels}, headers=auth.headers("ingest")
    )
    with db.session() as session:
        counts = prune_before(session, cutoff, datetime.now(UTC))
        session.commit()
    # old0..old2 are before the cutoff (123 µs past seconds 0, 1, 2), and the labels at 0.5 s
    # and 2.5 s.
    assert (counts.predictions, counts.labels) == (3, 2)
    left = [row[1] for row in stored(db)]
    assert left == [f"new{i}" for i in range(6)] + [f"old{i}" for i in range(3, 6)]
    with db.session() as session:
        assert session.scalar(text("SELECT count(*) FROM labels")) == 4
        recorded = session.execute(text("SELECT predictions, labels FROM prunes")).all()
    assert [tuple(r) for r in recorded] == [(3, 2)]


# --- revision 0009 ---------------------------------------------------------------------------


@pytest.fixture
def at_head(fresh_empty_url: str) -> Iterator[tuple[str, Flask]]:
    """A database of its own at head, with an app on it."""
    command.upgrade(alembic_config(fresh_empty_url), "head")
    app = create_app({"database_url": fresh_empty_url, "admin_token": ADMIN_TOKEN})
    try:
        yield fresh_empty_url, app
    finally:
        app.extensions["calmon.database"].dispose()


def _kind(connection: Connection) -> str | None:
    """``r`` for a plain ``predictions``, ``p`` for a partitioned one (PostgreSQL)."""
    return connection.scalar(
        text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass('predictions')")
    )


def test_downgrade_recomputes_the_old_digests_and_upgrade_brings_the_rows_back(
    at_head: tuple[str, Flask],
) -> None:
    url, app = at_head
    client = app.test_client()
    assert client.post("/v1/contracts/fit", json=fit_body(MODEL), headers=ADMIN).status_code == 201
    sent = [
        *items(datetime(2026, 9, 1, 23, 59, 59, tzinfo=UTC), prefix="a", n=3),
        *items(datetime.now(UTC).replace(microsecond=987654) - timedelta(hours=1), prefix="b"),
        # A whole second: isoformat() then writes no fraction at all.
        {"id": "whole", "ts": "2026-10-01T08:00:00Z", "cohort": {}, "logits": [0.0, 1.0, 0.0]},
    ]
    assert (
        client.post(
            "/v1/predictions", json={"model": MODEL, "predictions": sent}, headers=ADMIN
        ).status_code
        == 200
    )
    db: Database = app.extensions["calmon.database"]
    before = stored(db)
    db.dispose()
    config = alembic_config(url)
    engine = make_engine(url)
    expected = {
        i["id"]: old_digest(datetime.fromisoformat(i["ts"]), i["cohort"], i["logits"]) for i in sent
    }
    try:
        command.downgrade(config, "0008")
        with engine.connect() as connection:
            digests = {
                r[0]: bytes(r[1])
                for r in connection.execute(text("SELECT id, digest FROM prediction_keys"))
            }
            count = connection.scalar(text("SELECT count(*) FROM predictions"))
            if BACKEND == "postgresql":
                assert _kind(connection) == "p"
                homes = dict(
                    connection.execute(
                        text("SELECT id, tableoid::regclass::text FROM predictions")
                    ).all()
                )
                assert homes["a0"] == "predictions_p20260901"
                assert homes["a1"] == homes["a2"] == "predictions_p20260902"
                assert connection.scalar(text("SELECT to_regclass('predictions_default')"))
        assert digests == expected
        assert count == len(sent)

        command.upgrade(config, "head")
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT count(*) FROM predictions")) == len(sent)
            if BACKEND == "postgresql":
                assert _kind(connection) == "r"
                assert connection.scalar(text("SELECT to_regclass('predictions_default')")) is None
                assert connection.scalar(text("SELECT to_regclass('prediction_keys')")) is None
    finally:
        engine.dispose()
    again = Database(url)
    try:
        assert stored(again) == before
    finally:
        again.dispose()


def test_upgrade_carries_the_0008_rows_over(fresh_empty_url: str) -> None:
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0008")
    engine = make_engine(fresh_empty_url)
    ts = [datetime(2026, 9, 1, 12, tzinfo=UTC) + timedelta(days=d) for d in range(3)]
    try:
        with engine.begin() as connection:
            for i, t in enumerate(ts):
                params = {"id": f"m{i}", "ts": t, "digest": bytes([i]) * 32}
                connection.execute(
                    text(
                        "INSERT INTO prediction_keys (model, id, ts, digest)"
                        " VALUES ('m', :id, :ts, :digest)"
                    ).bindparams(TS),
                    params,
                )
                connection.execute(
                    text(
                        "INSERT INTO predictions (model, ts, id, contract_id, cohort, slices,"
                        " inputs, received_at) VALUES ('m', :ts, :id, 'c', '{\"k\":\"v\"}', '[]',"
                        " :inputs, :ts)"
                    ).bindparams(TS),
                    {**params, "inputs": bytes([i]) * 8},
                )
            connection.execute(
                text(
                    "INSERT INTO prunes (cutoff, pruned_at, partitions_dropped, predictions,"
                    " labels) VALUES (:ts, :ts, 2, 5, 1)"
                ).bindparams(TS),
                {"ts": ts[0]},
            )
        command.upgrade(config, "head")
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT model, id, ts, contract_id, CAST(cohort AS TEXT), inputs"
                    " FROM predictions ORDER BY id"
                ).columns(ts=UTCDateTime())
            ).all()
            prunes = connection.execute(text("SELECT predictions, labels FROM prunes")).all()
    finally:
        engine.dispose()
    assert [(r[0], r[1], r[2], r[3], r[4], bytes(r[5])) for r in rows] == [
        ("m", f"m{i}", t, "c", '{"k":"v"}', bytes([i]) * 8) for i, t in enumerate(ts)
    ]
    assert [tuple(r) for r in prunes] == [(5, 1)]
