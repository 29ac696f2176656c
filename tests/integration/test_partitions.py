"""Daily partitions of ``predictions`` on PostgreSQL, and the migration that introduced them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from alembic import command
from flask.testing import FlaskClient
from sqlalchemy import text

from service.cli import main
from service.db import partitions
from service.db.database import Database, make_engine
from service.db.migrate import alembic_config
from service.stream.retention_store import prune_before
from tests.integration.conftest import BACKEND, Auth
from tests.integration.factories import fit_body
from tests.integration.test_retention import count, iso, ok

MODEL = "parted"
postgres_only = pytest.mark.skipif(BACKEND != "postgresql", reason="partitions are PostgreSQL's")


def post_predictions(
    client: FlaskClient, auth: Auth, items: list[tuple[str, datetime]], logits: list[float]
) -> tuple[int, dict]:
    response = client.post(
        "/v1/predictions",
        json={
            "model": MODEL,
            "predictions": [{"id": i, "ts": iso(ts), "logits": logits} for i, ts in items],
        },
        headers=auth.headers("ingest"),
    )
    return response.status_code, response.get_json()


def home_of(db: Database, ident: str) -> str:
    with db.session() as session:
        return str(
            session.scalar(
                text("SELECT tableoid::regclass::text FROM predictions WHERE id = :id"),
                {"id": ident},
            )
        )


@pytest.fixture
def fitted(client: FlaskClient, auth: Auth) -> None:
    ok(client.post("/v1/contracts/fit", json=fit_body(MODEL), headers=auth.headers()))


@postgres_only
def test_migration_leaves_partitions_ready_ahead(db: Database) -> None:
    today = datetime.now(UTC).date()
    with db.session() as session:
        days = [p.day for p in partitions.list_partitions(session.connection())]
        assert session.scalar(text("SELECT to_regclass('predictions_default')")) is not None
    assert today in days
    assert today + timedelta(days=partitions.AHEAD_DAYS) in days


@postgres_only
@pytest.mark.usefixtures("fitted")
def test_rows_live_in_their_days_partition_or_the_default(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    now = datetime.now(UTC)
    far = now - timedelta(days=60)
    status, _ = post_predictions(client, auth, [("today", now), ("later", far)], [2, 0, 0])
    assert status == 200
    assert home_of(db, "today") == partitions.partition_for(now.date()).name
    assert home_of(db, "later") == partitions.DEFAULT_PARTITION

    with db.session() as session:
        created = partitions.ensure_partitions(session.connection(), far.date(), far.date())
        session.commit()
    assert [p.day for p in created] == [far.date()]
    assert home_of(db, "later") == partitions.partition_for(far.date()).name
    assert count(db, "predictions_default") == 0

    labels = [{"id": "later", "label": 0, "ts": iso(far + timedelta(hours=2))}]
    joined = ok(
        client.post(
            "/v1/labels", json={"model": MODEL, "labels": labels}, headers=auth.headers("ingest")
        )
    )
    assert joined["joined"] == 1
    with db.engine.begin() as connection:
        connection.execute(text(f"DROP TABLE {partitions.partition_for(far.date()).name}"))


@postgres_only
@pytest.mark.usefixtures("fitted")
def test_an_id_stays_unique_across_partitions(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    now = datetime.now(UTC)
    assert post_predictions(client, auth, [("p1", now)], [1, 0, 0])[0] == 200
    status, body = post_predictions(client, auth, [("p1", now - timedelta(days=3))], [1, 0, 0])
    assert status == 409
    assert body["error"]["details"][0]["field"] == "predictions[0].id"
    status, body = post_predictions(client, auth, [("p1", now)], [1, 0, 0])
    assert (status, body["duplicates"]) == (200, 1)
    assert count(db, "predictions") == count(db, "prediction_keys") == 1


@postgres_only
@pytest.mark.usefixtures("fitted")
def test_prune_drops_whole_partitions(client: FlaskClient, auth: Auth, db: Database) -> None:
    today = datetime.now(UTC).date()
    old_days = [today - timedelta(days=d) for d in (12, 11, 10)]
    with db.session() as session:
        partitions.ensure_partitions(session.connection(), old_days[0], old_days[-1])
        session.commit()
    items = [
        (f"d{i}-{j}", datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=j))
        for i, day in enumerate(old_days)
        for j in range(3)
    ]
    assert post_predictions(client, auth, items, [0, 1, 0])[0] == 200
    cutoff = datetime.combine(old_days[-1], datetime.min.time(), tzinfo=UTC)
    with db.session() as session:
        counts = prune_before(session, cutoff, datetime.now(UTC))
        session.commit()
        left = [p.day for p in partitions.list_partitions(session.connection())]
    assert (counts.partitions_dropped, counts.predictions) == (2, 6)
    assert not set(old_days[:2]) & set(left)
    assert old_days[-1] in left
    assert count(db, "predictions") == count(db, "prediction_keys") == 3


@postgres_only
def test_partitions_command_creates_ahead(
    database_url: str, db: Database, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    assert main(["partitions", "--ahead", "10"]) == 0
    out = capsys.readouterr().out
    last = datetime.now(UTC).date() + timedelta(days=10)
    assert partitions.partition_for(last).name in out
    assert "(new)" in out
    assert main(["partitions", "--ahead", "10"]) == 0
    assert "(new)" not in capsys.readouterr().out


def test_migration_carries_stored_predictions_over(fresh_empty_url: str) -> None:
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0005")
    engine = make_engine(fresh_empty_url)
    old = datetime(2026, 9, 1, 12, tzinfo=UTC)
    rows = [
        {"id": f"m{i}", "ts": old + timedelta(days=i), "digest": bytes([i]) * 32} for i in range(3)
    ]
    try:
        with engine.begin() as connection:
            for row in rows:
                connection.execute(
                    text(
                        "INSERT INTO predictions (model, id, contract_id, ts, cohort, slices,"
                        " inputs, digest, received_at) VALUES ('m', :id, 'c', :ts, '{}', '[]',"
                        " :inputs, :digest, :ts)"
                    ),
                    {**row, "inputs": b"\x00" * 8, "ts": row["ts"].isoformat()},
                )
        command.upgrade(config, "head")
        with engine.connect() as connection:
            keys = connection.execute(
                text("SELECT id, digest FROM prediction_keys ORDER BY id")
            ).all()
            stored = connection.scalar(text("SELECT count(*) FROM predictions WHERE model = 'm'"))
            if engine.dialect.name == "postgresql":
                days = {p.day for p in partitions.list_partitions(connection)}
                assert {date(2026, 9, 1), date(2026, 9, 3)} <= days
                assert connection.scalar(text("SELECT count(*) FROM predictions_default")) == 0
        assert [(k, bytes(d)) for k, d in keys] == [(r["id"], r["digest"]) for r in rows]
        assert stored == 3

        command.downgrade(config, "0005")
        with engine.connect() as connection:
            back = connection.execute(text("SELECT id, digest FROM predictions ORDER BY id")).all()
        assert [(k, bytes(d)) for k, d in back] == [(r["id"], r["digest"]) for r in rows]
    finally:
        engine.dispose()


@postgres_only
@pytest.mark.usefixtures("fitted")
def test_partitions_since_gives_a_backfill_its_own_days(
    client: FlaskClient,
    auth: Auth,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backfill = datetime.now(UTC) - timedelta(days=20)
    assert post_predictions(client, auth, [("old", backfill)], [0, 0, 1])[0] == 200
    assert home_of(db, "old") == partitions.DEFAULT_PARTITION

    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    assert main(["partitions", "--since", backfill.date().isoformat()]) == 0
    capsys.readouterr()
    assert home_of(db, "old") == partitions.partition_for(backfill.date()).name
    with db.session() as session:
        days = {p.day for p in partitions.list_partitions(session.connection())}
    assert {backfill.date() + timedelta(days=d) for d in range(21)} <= days
