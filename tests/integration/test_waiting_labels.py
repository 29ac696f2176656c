"""Labels waiting for their prediction: found through their partial index, and matched with a
prediction batch by a join that cannot degrade into comparing every pair."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.database import Database
from service.stream import prediction_store
from service.stream.label_classes import SentLabel
from tests.integration.conftest import BACKEND
from tests.integration.test_served import wait_until

NOW = datetime(2026, 11, 1, tzinfo=UTC)


@contextmanager
def plans_of(session: Session, marker: str) -> Iterator[list[str]]:
    """The plans of the statements containing ``marker`` that ``session`` runs in the block,
    explained on the same connection just before each runs (under the settings in force)."""
    connection = session.connection()
    plans: list[str] = []

    def explain(_conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if marker not in statement:
            return
        prefix = "EXPLAIN " if BACKEND == "postgresql" else "EXPLAIN QUERY PLAN "
        rows = cursor.connection.execute(prefix + statement, params).fetchall()
        plans.append("\n".join(str(row[-1]) for row in rows))

    event.listen(connection, "before_cursor_execute", explain)
    try:
        yield plans
    finally:
        event.remove(connection, "before_cursor_execute", explain)


def store_waiting_labels(session: Session, ids: list[str]) -> None:
    joined, waiting, _ = prediction_store.record_labels(
        session, "m", [(i, 1, None, NOW) for i in sorted(ids)], NOW
    )
    assert joined.ids == [] and waiting == sorted(ids)


def test_waiting_labels_are_counted_through_their_partial_index(db: Database) -> None:
    with db.session() as session:
        store_waiting_labels(session, ["w1", "w2"])
        if BACKEND == "postgresql":
            session.execute(text("SET LOCAL enable_seqscan = off"))
        with plans_of(session, "count(") as plans:
            assert prediction_store.count_waiting_labels(session, "m") == 2
    assert len(plans) == 1 and "ix_labels_waiting" in plans[0], plans


@pytest.mark.skipif(BACKEND != "postgresql", reason="the PostgreSQL planner's join methods")
def test_a_batch_meets_the_waiting_labels_without_a_nested_loop(db: Database) -> None:
    from service.stream.sql.postgresql import CLAIM_WAITING

    ids = [f"p{i:05d}" for i in range(10_000)]
    with db.session() as session:
        session.execute(
            text(
                "INSERT INTO labels (model, id, label, ts, received_at, joined) SELECT 'm',"
                " 'j' || i, 0, :now, :now, true FROM generate_series(1, 20000) i"
            ),
            {"now": NOW},
        )
        store_waiting_labels(session, ["p00007"])
        session.execute(text("ANALYZE labels"))
        driver = session.connection().connection.dbapi_connection

        def plan() -> str:
            rows = driver.execute(f"EXPLAIN {CLAIM_WAITING}", {"model": "m", "ids": ids})
            return "\n".join(str(row[0]) for row in rows)

        with backend_of(session).linear_joins(session):
            guarded = plan()
        found = prediction_store.join_waiting_labels(session, "m", set(ids))
        setting = session.scalar(text("SHOW enable_nestloop"))
    assert "Hash Join" in guarded and "Nested Loop" not in guarded, guarded
    assert found == {"p00007": SentLabel(1)}
    assert setting == "on"


def test_a_label_a_concurrent_batch_commits_first_counts_as_stored_before(db: Database) -> None:
    """The second batch's insert waits on the key of the first's uncommitted label and, once
    the first commits, records it as stored before (no error, nothing lost)."""
    outcome: dict[str, Any] = {}

    def second() -> None:
        with db.session() as session:
            outcome["recorded"] = prediction_store.record_labels(
                session, "m", [("a", 2, None, NOW), ("x", 2, None, NOW)], NOW
            )
            session.commit()

    with db.session() as first:
        store_waiting_labels(first, ["x"])
        thread = threading.Thread(target=second)
        thread.start()
        if BACKEND == "postgresql":
            waiting_on_a_lock = text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            )

            def second_waits() -> int:
                # pg_stat_activity is read once per transaction: each look is a transaction.
                with db.session() as observer:
                    return observer.scalar(waiting_on_a_lock) or 0

            wait_until(second_waits, 30, "the second batch to wait on the first's label")
        else:
            time.sleep(0.5)
        first.commit()
    thread.join(30)
    joined, waiting, stored = outcome["recorded"]
    assert (joined.ids, waiting, stored) == ([], ["a"], {"x": SentLabel(1)})
    with db.session() as session:
        assert prediction_store.count_waiting_labels(session, "m") == 2


def test_resent_and_overlapping_batches_keep_the_labels_stored_first(db: Database) -> None:
    """A batch holding labels stored before (all of them, or some) stores only the new ones
    and reports the others with the label stored first, whatever it says now."""
    with db.session() as session:
        store_waiting_labels(session, ["a", "b"])
        session.commit()
    batches = {
        "resent": (
            [("a", 1, None, NOW), ("b", 1, None, NOW)],
            [],
            {"a": SentLabel(1), "b": SentLabel(1)},
        ),
        "overlapping": (
            [("b", 3, None, NOW), ("c", 2, None, NOW), ("d", 0, None, NOW)],
            ["c", "d"],
            {"b": SentLabel(1)},
        ),
        "fresh": ([("e", 4, None, NOW)], ["e"], {}),
    }
    for name, (labels, new, stored_before) in batches.items():
        with db.session() as session:
            joined, waiting, stored = prediction_store.record_labels(session, "m", labels, NOW)
            session.commit()
        assert (joined.ids, waiting, stored) == ([], new, stored_before), name
    with db.session() as session:
        rows = session.execute(text("SELECT id, label FROM labels WHERE model = 'm' ORDER BY id"))
        assert [tuple(r) for r in rows] == [("a", 1), ("b", 1), ("c", 2), ("d", 0), ("e", 4)]
