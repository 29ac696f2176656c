"""What PostgreSQL spends on a label's key accesses, by where the labels fall among the stored
predictions.

    python bench/bench_label_access.py [--predictions 10000000] [--labels 500000] [--batch 10000]

On a fresh, migrated database next to ``CALMON_BENCH_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), dropped after: stores ``--predictions``
predictions of one model (ids ``p0``, ``p1``, ... in event-time order, K = 10 inputs of 80 B,
written by one ``INSERT ... SELECT``), and labels for all of them but the ones measured, in
random order (the labels' key as a stream with scattered delays leaves it). Then, on one
connection, in batches of ``--batch`` ids (each sorted, as a label request sorts them), for
``--labels`` ids in order (one run of consecutive predictions, as labels 1-4 h after their
predictions come) and ``--labels`` ids scattered uniformly over the stored predictions, it times:

1. calmon's label join statement (``prediction_store.record_labels``: stage, probe each label's
   prediction, insert the labels, return what the buckets need);
2. the probe alone, reading the prediction's row (contract, event time, slices, inputs);
3. the probe alone, reading the key only (an index-only scan);
4. the insert into ``labels`` alone.

Each step runs on its own ids, none labeled before. It prints labels/s and the CPU seconds of the
connection's server process per label (read from ``/proc``: the server must run on this
machine). The server settings are whatever the server has; they are printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
from sqlalchemy import text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import drop_database, fresh_database
from pgstats import process_cpu, server_settings

from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.stream import prediction_store
from service.stream.sql.postgresql import FOUND_COLUMNS, prediction_by_id

MODEL = "bench"
STEPS = ("label join statement", "probe, row", "probe, key only", "insert into labels")
#: One measured step: a session and a batch of sorted prediction ids.
Step = Callable[[Session, list[str]], None]


def store_predictions(url: str, n: int) -> None:
    """``n`` predictions of ``MODEL``, one every 0.25 s of event time, and their statistics."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO predictions (model, id, ts, contract_id, cohort, slices, inputs,"
            " received_at) SELECT %(model)s, 'p' || i,"
            " now() - interval '30 days' + i * interval '250 milliseconds',"
            " '00000000-0000-0000-0000-000000000000', '{\"region\": \"emea\"}'::jsonb,"
            " '[\"all\",\"region=emea\"]', decode(repeat(md5(i::text), 5), 'hex'), now()"
            " FROM generate_series(0, %(last)s) i",
            {"model": MODEL, "last": n - 1},
        )
        conn.execute("VACUUM ANALYZE predictions")


def label_all_but(url: str, n: int, measured: np.ndarray) -> None:
    """A label for every stored prediction but the ``measured`` ones, inserted in random
    order; then a checkpoint, so the measured writes pay full-page images as a stream's writes
    do after each checkpoint."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE measured (i int PRIMARY KEY)")
        with conn.cursor().copy("COPY measured (i) FROM STDIN") as copy:
            for i in measured.tolist():
                copy.write_row((i,))
        conn.execute(
            "INSERT INTO labels (model, id, label, label_name, ts, received_at, joined)"
            " SELECT %(model)s, 'p' || i, i %% 10, NULL, now(), now(), true"
            " FROM generate_series(0, %(last)s) i"
            " WHERE NOT EXISTS (SELECT FROM measured m WHERE m.i = i) ORDER BY random()",
            {"model": MODEL, "last": n - 1},
        )
        conn.execute("VACUUM ANALYZE labels")
        conn.execute("CHECKPOINT")


def id_sets(n: int, size: int, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    """Per placement, one array of ``size`` prediction indices per step, all disjoint: runs of
    consecutive indices (``in order``) and indices drawn uniformly (``scattered``)."""
    runs = rng.choice(n // size, len(STEPS), replace=False) * size
    in_order = [np.arange(start, start + size) for start in runs.tolist()]
    taken = np.concatenate(in_order)
    free = np.setdiff1d(np.arange(n), taken, assume_unique=True)
    scattered = rng.choice(free, size * len(STEPS), replace=False)
    return {
        "in order": in_order,
        "scattered": [scattered[s * size : (s + 1) * size] for s in range(len(STEPS))],
    }


def timed(database: Database, ids: np.ndarray, batch: int, step: Step) -> tuple[float, float]:
    """``(labels/s, server CPU µs per label)`` of ``step`` over ``ids`` in sorted batches, a
    commit after each."""
    with database.session() as session:
        pid = int(session.scalar(text("SELECT pg_backend_pid()")))
        session.commit()
        cpu, start = process_cpu(pid), time.perf_counter()
        for b in range(0, len(ids), batch):
            step(session, sorted(f"p{i}" for i in ids[b : b + batch].tolist()))
            session.commit()
        seconds, cpu = time.perf_counter() - start, process_cpu(pid) - cpu
    return len(ids) / seconds, cpu / len(ids) * 1e6


def steps(now: datetime) -> tuple[Step, ...]:
    """The measured steps, in ``STEPS`` order."""

    def join(session: Session, ids: list[str]) -> None:
        prediction_store.record_labels(
            session, MODEL, [(i, int(i[-1]), None, now) for i in ids], now
        )

    def probe(columns: str) -> Step:
        # Every column read is used, or the planner drops it from the subquery.
        used = " + ".join(f"count(p.{c})" for c in columns.split(", "))
        statement = text(
            f"SELECT {used} FROM unnest(CAST(:ids AS text[])) AS u(id)"
            f" CROSS JOIN LATERAL ({prediction_by_id('u.id', columns)}) p"
        )

        def run(session: Session, ids: list[str]) -> None:
            session.execute(statement, {"model": MODEL, "ids": ids})

        return run

    def insert(session: Session, ids: list[str]) -> None:
        session.execute(
            text(
                "INSERT INTO labels (model, id, label, label_name, ts, received_at, joined)"
                " SELECT :model, u.id, 1, NULL, :now, :now, true"
                " FROM unnest(CAST(:ids AS text[])) AS u(id)"
            ),
            {"model": MODEL, "ids": ids, "now": now},
        )

    return (join, probe(FOUND_COLUMNS), probe("id"), insert)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictions", type=int, default=10_000_000)
    parser.add_argument("--labels", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name, url = fresh_database(base)
    try:
        upgrade_to_head(url)
        started = time.perf_counter()
        store_predictions(url, args.predictions)
        sets = id_sets(args.predictions, args.labels, np.random.default_rng(args.seed))
        measured = np.concatenate([ids for group in sets.values() for ids in group])
        label_all_but(url, args.predictions, measured)
        print(f"stored in {time.perf_counter() - started:.0f} s", flush=True)
        database = Database(url, pool_size=1, max_overflow=0)
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores,"
            f" Python {platform.python_version()}; {args.predictions:,} predictions stored and"
            f" labeled but the measured; {args.labels:,} labels per step, batches of"
            f" {args.batch:,}"
        )
        print(f"server: {server_settings(url)}\n")
        print("| labels | step | labels/s | server CPU per label |\n|---|---|---|---|")
        now = datetime.now(UTC)
        for placement, ids_of in sets.items():
            for label, step, ids in zip(STEPS, steps(now), ids_of, strict=True):
                rate, cpu = timed(database, ids, args.batch, step)
                print(f"| {placement} | {label} | {rate:,.0f}/s | {cpu:.1f} µs |", flush=True)
        database.dispose()
    finally:
        drop_database(base, name)


if __name__ == "__main__":
    main()
