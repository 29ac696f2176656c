"""Benchmark the production stream over HTTP on PostgreSQL, against the database's own ceilings.

    python bench/bench_stream.py [--predictions 10000000] [--batch 10000] [--clients 4]

Starts ``calmon serve`` (2 gunicorn workers) on a fresh PostgreSQL database next to
``CALMON_BENCH_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``), then:

1. ingest: POST /v1/predictions in batches of ``--batch`` predictions with K = 10, bodies
   serialised before the clock starts, ``--clients`` concurrent senders; then the same batches
   again (all duplicates: the idempotent retry path);
2. label join: POST /v1/labels for every stored prediction, in event-time order shuffled within
   each million (labels arriving hours later, roughly in the order of their predictions);
3. reading: GET /v1/models/{model}/calibration over a window holding every labeled prediction;
4. ceilings measured in the same run with psycopg: binary COPY into a staging table +
   INSERT ... ON CONFLICT DO NOTHING (ingest; both into calmon's key table + payload table and
   into one table keyed by (model, id), the reference ceiling), and the label join's SQL alone.

Prints a markdown table with rates, ratios to the ceilings and the targets.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
K = 10
PORT = 8765
TOKEN = "calmon_bench-token"


def fresh_database(base: str) -> tuple[str, str]:
    name = f"calmon_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, base.rsplit("/", 1)[0] + "/" + name


def drop_database(base: str, name: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_service(url: str, workers: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_ADMIN_TOKEN": TOKEN,
        "CALMON_LOG_LEVEL": "WARNING",
    }
    calmon = str(Path(sys.executable).parent / "calmon")
    subprocess.run([calmon, "migrate"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [calmon, "serve", "--port", str(PORT), "--workers", str(workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("calmon did not start")


def call(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def send_all(bodies: list[bytes], path: str, clients: int) -> tuple[float, list[dict]]:
    """POST every body with ``clients`` concurrent connections; return (seconds, replies)."""
    work: queue.Queue[bytes] = queue.Queue()
    for b in bodies:
        work.put(b)
    replies: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def sender() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        while True:
            try:
                body = work.get_nowait()
            except queue.Empty:
                return
            status, raw = call(conn, "POST", path, body)
            with lock:
                if status != 200:
                    errors.append(f"{status} {raw[:200]!r}")
                else:
                    replies.append(json.loads(raw))

    threads = [threading.Thread(target=sender) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    return elapsed, replies


def prediction_batches(
    n: int, batch: int, seed: int, base_ts: datetime, span_hours: float = 20
) -> Iterator[tuple[list[str], bytes, np.ndarray]]:
    """Batches of predictions whose event times advance through ``span_hours`` like live traffic."""
    rng = np.random.default_rng(seed)
    step = span_hours * 3600 / n
    regions = ["emea", "apac", "amer"]
    for start in range(0, n, batch):
        size = min(batch, n - start)
        logits = np.round(rng.normal(size=(size, K)) * 2, 6)
        ids = [f"p{start + i}" for i in range(size)]
        offsets = (start + np.arange(size)) * step
        items = [
            {
                "id": ids[i],
                "ts": (base_ts + timedelta(seconds=float(offsets[i])))
                .isoformat()
                .replace("+00:00", "Z"),
                "cohort": {"region": regions[(start + i) % 3]},
                "logits": logits[i].tolist(),
            }
            for i in range(size)
        ]
        yield ids, json.dumps({"model": "bench", "predictions": items}).encode(), logits


def synthetic_fit_body(model: str, n: int = 2000, seed: int = 1) -> bytes:
    """A ``POST /v1/contracts/fit`` body for a K = 10 model on random logits."""
    rng = np.random.default_rng(seed)
    sets = {
        name: {
            "logits": np.round(rng.normal(size=(n, K)), 6).tolist(),
            "labels": rng.integers(0, K, n).tolist(),
        }
        for name in ("fit", "eval")
    }
    return json.dumps(
        {
            "model": model,
            "checkpoint": model,
            "task": "multiclass",
            "classes": [f"c{k}" for k in range(K)],
            "population": "synthetic",
            "outcome": "top-label correct",
            "split": {"method": "random"},
            "data_window": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
            "method": "temperature",
            **sets,
        }
    ).encode()


def ingest_ceiling(url: str, rows: int, *, keyed: bool) -> float:
    """Rows/s of binary COPY into a staging table + INSERT ... ON CONFLICT DO NOTHING.

    ``keyed`` False: into one table with the (model, id) primary key (the reference ceiling).
    ``keyed`` True: calmon's own write path: into a copy of ``predictions`` with all its indexes
    (primary key ``(model, id)``, BRIN on ``ts``), returning the ids inserted.
    """
    rng = np.random.default_rng(9)
    now = datetime.now(UTC)
    data = [
        (
            f"c{i}",
            now,
            '{"region":"emea"}',
            '["all","region=emea"]',
            rng.normal(size=K).tobytes(),
            os.urandom(32),
        )
        for i in range(rows)
    ]
    payload = (
        "INSERT INTO ceiling_predictions (model, ts, id, contract_id, cohort, slices, inputs,"
        " received_at) SELECT 'm', s.ts, s.id, 'c', s.cohort, s.slices, s.inputs, now() FROM s"
    )
    if keyed:
        setup = ("CREATE TABLE ceiling_predictions (LIKE predictions INCLUDING ALL)",)
        insert = f"{payload} ON CONFLICT (model, id) DO NOTHING RETURNING id"
        teardown = "DROP TABLE ceiling_predictions"
    else:
        setup = (
            "CREATE TABLE ceiling_predictions (LIKE predictions INCLUDING DEFAULTS, digest bytea,"
            " PRIMARY KEY (model, id))",
            "CREATE INDEX ON ceiling_predictions (model, ts)",
        )
        insert = (
            "INSERT INTO ceiling_predictions (model, id, contract_id, ts, cohort, slices, inputs,"
            " digest, received_at) SELECT 'm', id, 'c', ts, cohort, slices, inputs, digest,"
            " now() FROM s ON CONFLICT DO NOTHING"
        )
        teardown = "DROP TABLE ceiling_predictions"
    with psycopg.connect(url) as conn:
        for statement in setup:
            conn.execute(statement)
        conn.commit()
        start = time.perf_counter()
        for offset in range(0, rows, 10_000):
            chunk = data[offset : offset + 10_000]
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS s (id text, ts timestamptz, cohort json,"
                " slices text, inputs bytea, digest bytea) ON COMMIT DELETE ROWS"
            )
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY s (id, ts, cohort, slices, inputs, digest) FROM STDIN (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(["text", "timestamptz", "json", "text", "bytea", "bytea"])
                for row in chunk:
                    copy.write_row(row)
            conn.execute(insert)
            conn.commit()
        elapsed = time.perf_counter() - start
        conn.execute(teardown)
        conn.commit()
    return rows / elapsed


def label_ceiling(url: str, ids: list[str], labels: np.ndarray) -> float:
    """Rows/s of the label join's SQL alone, in batches of 10,000.

    Binary COPY into a temp table, INSERT ... ON CONFLICT into a copy of ``labels`` with the
    prediction's existence, and the join that reads back each prediction's inputs; rolled back.
    """
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE ceiling_labels (LIKE labels INCLUDING ALL)")
        conn.commit()
        start = time.perf_counter()
        for offset in range(0, len(ids), 10_000):
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS l (id text, label smallint,"
                " ts timestamptz) ON COMMIT DELETE ROWS"
            )
            now = datetime.now(UTC)
            with (
                conn.cursor() as cur,
                cur.copy("COPY l (id, label, ts) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(["text", "int2", "timestamptz"])
                for i in range(offset, min(offset + 10_000, len(ids))):
                    copy.write_row((ids[i], int(labels[i]), now))
            conn.execute("ANALYZE l")
            conn.execute(
                "WITH found AS (SELECT l.id, l.label, l.ts, p.inputs FROM l LEFT JOIN LATERAL"
                " (SELECT inputs FROM predictions WHERE model = 'bench' AND id = l.id OFFSET 0) p"
                " ON true),"
                " ins AS (INSERT INTO ceiling_labels (model, id, label, ts, received_at, joined)"
                " SELECT 'bench', id, label, ts, now(), inputs IS NOT NULL"
                " FROM found ON CONFLICT DO NOTHING RETURNING id)"
                " SELECT f.inputs FROM found f JOIN ins ON ins.id = f.id"
            ).fetchall()
            conn.commit()
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE ceiling_labels")
        conn.commit()
    return len(ids) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictions", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name, url = fresh_database(base)
    service = start_service(url, args.workers)
    results: list[tuple[str, str, str, str]] = []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        status, raw = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body("bench"))
        assert status == 201, raw

        base_ts = datetime.now(UTC) - timedelta(hours=22)
        chunk = 1_000_000
        ingest_seconds = 0.0
        all_ids: list[str] = []
        first_bodies: list[bytes] = []
        sent = 0
        generator = prediction_batches(args.predictions, args.batch, 2, base_ts)
        while sent < args.predictions:
            bodies = []
            for ids, body, _ in generator:
                bodies.append(body)
                all_ids += ids
                sent += len(ids)
                if len(bodies) * args.batch >= chunk:
                    break
            if not first_bodies:
                first_bodies = bodies[:20]
            seconds, replies = send_all(bodies, "/v1/predictions", args.clients)
            assert sum(r["accepted"] for r in replies) == sum(
                len(json.loads(b)["predictions"]) for b in bodies
            )
            ingest_seconds += seconds
            print(f"ingested {sent:,} ({sent / ingest_seconds:,.0f}/s so far)", flush=True)
        ingest_rate = args.predictions / ingest_seconds
        seconds, replies = send_all(first_bodies, "/v1/predictions", args.clients)
        duplicates = sum(r["duplicates"] for r in replies)
        retry_rate = duplicates / seconds

        labels = np.random.default_rng(3).integers(0, K, len(all_ids))
        order = np.arange(len(all_ids))
        shuffler = np.random.default_rng(4)
        for offset in range(0, len(order), chunk):
            shuffler.shuffle(order[offset : offset + chunk])
        label_seconds = 0.0
        now_text = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        for offset in range(0, len(order), chunk):
            part = order[offset : offset + chunk]
            bodies = [
                json.dumps(
                    {
                        "model": "bench",
                        "labels": [
                            {"id": all_ids[i], "label": int(labels[i]), "ts": now_text}
                            for i in part[b : b + args.batch]
                        ],
                    }
                ).encode()
                for b in range(0, len(part), args.batch)
            ]
            seconds, replies = send_all(bodies, "/v1/labels", args.clients)
            assert sum(r["joined"] for r in replies) == len(part)
            label_seconds += seconds
            print(
                f"labeled {offset + len(part):,} ({(offset + len(part)) / label_seconds:,.0f}/s"
                " so far)",
                flush=True,
            )
        label_rate = len(all_ids) / label_seconds

        latencies = []
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        for _ in range(args.queries):
            start = time.perf_counter()
            status, raw = call(conn, "GET", "/v1/models/bench/calibration?window=24h")
            latencies.append((time.perf_counter() - start) * 1000)
            assert status == 200, raw
        reading = json.loads(raw)
        assert reading["n_labeled"] == args.predictions, reading["n_labeled"]
        p50, p95 = np.percentile(latencies, [50, 95])

        sample = min(len(all_ids), 1_000_000)
        ceiling_rows = min(args.predictions, 500_000)
        ingest_max = ingest_ceiling(url, ceiling_rows, keyed=True)
        single_table_max = ingest_ceiling(url, ceiling_rows, keyed=False)
        label_max = label_ceiling(url, [all_ids[i] for i in order[:sample]], labels[:sample])
        results = [
            (
                "ingest, batches of 10,000 (K=10), 2 workers",
                f"{ingest_rate:,.0f}/s",
                f"{ingest_rate / ingest_max:.2f} of {ingest_max:,.0f}/s (keys + partitioned"
                f" payload); {ingest_rate / single_table_max:.2f} of {single_table_max:,.0f}/s"
                " (one table)",
                ">= 100,000/s",
            ),
            ("idempotent retry (all duplicates)", f"{retry_rate:,.0f}/s", "", ""),
            (
                f"label join against {args.predictions:,} predictions",
                f"{label_rate:,.0f}/s",
                f"{label_rate / label_max:.2f} of {label_max:,.0f}/s",
                ">= 50,000/s",
            ),
            (
                f"GET calibration, window of {args.predictions:,} labeled",
                f"p50 {p50:.1f} ms, p95 {p95:.1f} ms",
                "",
                "p95 <= 50 ms",
            ),
        ]
    finally:
        service.terminate()
        service.wait(timeout=60)
        if not args.keep:
            drop_database(base, name)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, PostgreSQL at {base.rsplit('@', 1)[-1]}\n"
    )
    print("| what | measured | vs database ceiling | target |")
    print("|---|---|---|---|")
    for row in results:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
