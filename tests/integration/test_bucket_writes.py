"""Bucket writes: sums added exactly, and an empty bucket inserted only where none is stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from service.db.database import Database
from service.stream.bucket_store import BucketDelta, BucketKey, apply_deltas, window_totals
from tests.integration.conftest import BACKEND

HOUR = datetime(2026, 11, 1, 10, tzinfo=UTC)


def _key(minutes: int) -> BucketKey:
    return ("all", "5m", HOUR + timedelta(minutes=minutes), "c1")


def _delta(seed: int) -> BucketDelta:
    rng = np.random.default_rng(seed)
    return BucketDelta(
        n_predictions=int(rng.integers(1, 9)),
        n_labeled=int(rng.integers(0, 9)),
        unlabeled_expected_correct=float(rng.random()),
        confidence_counts=rng.random(4),
        stats=rng.random(7),
    )


def _apply(session: Session, deltas: dict[BucketKey, BucketDelta]) -> list[str]:
    """Apply ``deltas`` and return the bucket inserts the statements issued."""
    inserts: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().startswith("INSERT INTO calibration_buckets"):
            inserts.append(statement)

    connection = session.connection()
    event.listen(connection, "before_cursor_execute", record)
    try:
        apply_deltas(session, "m", deltas)
    finally:
        event.remove(connection, "before_cursor_execute", record)
    return inserts


def test_only_missing_buckets_are_inserted_and_every_sum_is_exact(db: Database) -> None:
    first = {_key(5 * i): _delta(i) for i in range(0, 6)}
    second = {_key(5 * i): _delta(100 + i) for i in range(3, 9)}
    third = {_key(5 * i): _delta(200 + i) for i in (0, 4, 8)}
    expected_inserts = {"first": 1, "second": 1, "third": 0}
    for name, deltas in zip(expected_inserts, (first, second, third), strict=True):
        with db.session() as session:
            assert len(_apply(session, deltas)) == expected_inserts[name], name
            session.commit()
    with db.session() as session:
        stored = window_totals(session, "m", "all", [("5m", HOUR, HOUR + timedelta(hours=1))])
    assert [t.bucket_start for t in stored] == sorted(k[2] for k in first | second)
    for totals in stored:
        added = [d[k] for d in (first, second, third) for k in d if k[2] == totals.bucket_start]
        assert totals.n_predictions == sum(d.n_predictions for d in added)
        assert totals.n_labeled == sum(d.n_labeled for d in added)
        assert totals.unlabeled_expected_correct == sum(d.unlabeled_expected_correct for d in added)
        for name in ("confidence_counts", "stats"):
            expected = np.zeros_like(getattr(added[0], name))
            for d in added:
                expected = expected + getattr(d, name)
            np.testing.assert_array_equal(getattr(totals, name), expected)


def _bucket_rows_read(session: Session) -> int:
    """Rows of ``calibration_buckets`` this backend has read so far (its pending statistics)."""
    return int(
        session.execute(
            text(
                "SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                " WHERE relname = 'calibration_buckets'"
            )
        ).scalar_one()
    )


@pytest.mark.skipif(BACKEND != "postgresql", reason="the PostgreSQL planner's join methods")
def test_a_batch_reads_only_the_buckets_it_touches_whatever_the_join_method(db: Database) -> None:
    """Of a model's 3,000 buckets, a batch that adds to three reads a handful, even when the
    planner may not loop over the staged rows (as it may not when the staged rows' statistics
    are stale)."""
    stored = {_key(5 * i): _delta(i) for i in range(3_000)}
    with db.session() as session:
        apply_deltas(session, "m", stored)
        session.commit()
    with db.engine.connect() as connection:
        # The join method is what is varied here; the table's own statistics are made current,
        # as autovacuum keeps them (tests/integration/test_migrations.py checks its settings).
        connection.execute(text("ANALYZE calibration_buckets"))
        connection.commit()
    touched = {_key(5 * i): _delta(10_000 + i) for i in (1, 1_500, 2_999)}
    with db.session() as session:
        session.execute(text("SET LOCAL enable_nestloop = off"))
        before = _bucket_rows_read(session)
        apply_deltas(session, "m", touched)
        read = _bucket_rows_read(session) - before
        session.commit()
    assert read <= 10 * len(touched), read
    with db.session() as session:
        totals = window_totals(session, "m", "all", [("5m", HOUR, HOUR + timedelta(days=11))])
    by_start = {t.bucket_start: t for t in totals}
    for key, delta in touched.items():
        assert by_start[key[2]].n_predictions == stored[key].n_predictions + delta.n_predictions


@pytest.mark.parametrize(
    ("name", "value", "stored"),
    [
        ("stats", np.nan, 1.0),
        ("confidence_counts", np.inf, 1.0),
        ("stats", 1.7e308, 1.7e308),
    ],
    ids=["nan-stats", "inf-counts", "overflowing-sum"],
)
def test_a_vector_that_is_or_sums_to_non_finite_is_refused_and_nothing_is_written(
    db: Database, name: str, value: float, stored: float
) -> None:
    """A non-finite delta, or a finite one whose sum with the stored vector overflows, would
    make the bucket unreadable: the batch is refused and a rollback leaves every bucket as it
    was, the batch's finite deltas too."""
    first = {_key(0): _delta(1), _key(5): _delta(2)}
    getattr(first[_key(5)], name)[:] = stored
    with db.session() as session:
        apply_deltas(session, "m", first)
        session.commit()
    bad = {_key(0): _delta(3), _key(5): _delta(4)}
    getattr(bad[_key(5)], name)[0] = value
    with db.session() as session, pytest.raises(ValueError, match="non-finite"):
        apply_deltas(session, "m", bad)
    with db.session() as session:
        totals = window_totals(session, "m", "all", [("5m", HOUR, HOUR + timedelta(hours=1))])
    assert len(totals) == 2
    for totals_of, key in zip(totals, sorted(first), strict=True):
        assert totals_of.n_predictions == first[key].n_predictions
        for vector in ("confidence_counts", "stats"):
            np.testing.assert_array_equal(getattr(totals_of, vector), getattr(first[key], vector))
