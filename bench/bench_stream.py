"""Benchmark the production stream over HTTP on PostgreSQL, each figure beside its ceiling.

    python bench/bench_stream.py [--predictions 10000000] [--days 30] [--batch 10000] [--body arrow]

Starts ``calmon serve`` (``--workers`` gunicorn workers of ``--threads`` threads; the default of
one thread runs sync workers, each taking one request at a time, so the two clients' batches
spread over the two processes: a threaded worker may accept both keep-alive connections and
serve them on one core) on a fresh PostgreSQL database next to
``CALMON_BENCH_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``), then:

1. early labels: 1% of the labels arrive before their predictions and wait;
2. ingest: POST /v1/predictions, batches of ``--batch`` predictions with K = 10 and one cohort
   key, event times advancing through ``--days`` days, as JSON or (``--body arrow``) as Arrow IPC
   streams (labels too); bodies serialised before the clock starts;
   then 20 batches again (all duplicates: the idempotent retry path);
3. label join: POST /v1/labels for the other 99%, sent in label-time order. The delay of a label
   after its prediction follows ``--label-order``: ``displaced`` (default) 1-4 h, with
   ``--displaced`` of them (default 3%) moved to random places (out of order); ``uniform-30d``
   uniform over 0-30 days; ``mixture`` 70% within 4 h and 30% within 60 days (label times past
   now are sent as now, in the order they would have arrived). Meanwhile the bench runs the
   refresher's loop itself with a refresh interval of ``--fold-every`` seconds (the service's
   own refresher is off): the label fold, timed on its own, three times per interval, and the
   rest of the cycle once per interval; it reports the fold's time, the
   labels it counted and its lag (how long the oldest label it counted had waited), the bucket
   rows written per label (``pg_stat_user_tables``), WAL per label and the bytes stored per
   labeled prediction;
4. reads: the calibration reading over 24 h and over all days, a 30-day history at 1 h steps,
   and /metrics;
5. ceilings in the same database and run: a bare binary-COPY loop (stage, then
   ``INSERT ... ON CONFLICT DO NOTHING``) into the minimal idempotent layout, one table
   ``(model, id, ts, cohort jsonb, logits bytea)`` keyed by ``(model, id)``, as one loop and as one
   loop per worker; calmon's own prediction and label statements driven directly (no HTTP, no
   JSON, no bucket statistics).

Prints the figures beside their ceilings, the server settings, and per phase the CPU seconds of
calmon, PostgreSQL and the client, WAL volume, WAL-buffer stalls, checkpoints, temporary-file
bytes and blocks read (``bench/pgstats.py``).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import multiprocessing
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
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pgstats import Counters, between, phase_table, server_settings, snapshot

ROOT = Path(__file__).resolve().parents[1]
K = 10
PORT = int(os.environ.get("CALMON_BENCH_PORT", "8765"))
TOKEN = "calmon_bench-token"
REGIONS = ("emea", "apac", "amer")
ARROW = "application/vnd.apache.arrow.stream"
#: The body format of the prediction and label batches: json or arrow (``--body``).
BODY = {"format": "json"}


def fresh_database(base: str) -> tuple[str, str]:
    name = f"calmon_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, base.rsplit("/", 1)[0] + "/" + name


def drop_database(base: str, name: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def port_in_use() -> bool:
    try:
        http.client.HTTPConnection("127.0.0.1", PORT, timeout=1).connect()
    except OSError:
        return False
    return True


def start_service(
    url: str,
    workers: int,
    threads: int,
    settings: dict[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``calmon serve`` on ``url`` (migrated first), refresher off and warnings logged only
    unless ``settings`` (environment variables) say otherwise; its log lines go to ``log``
    (default: nowhere)."""
    if port_in_use():
        raise RuntimeError(f"port {PORT} is taken (another benchmark?); set CALMON_BENCH_PORT")
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_ADMIN_TOKEN": TOKEN,
        "CALMON_LOG_LEVEL": "WARNING",
        "CALMON_REFRESH_IN_SERVICE": "false",
        **(settings or {}),
    }
    calmon = str(Path(sys.executable).parent / "calmon")
    subprocess.run([calmon, "migrate"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [
            calmon,
            "serve",
            "--port",
            str(PORT),
            "--workers",
            str(workers),
            "--threads",
            str(threads),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if log is None else log.open("ab"),
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
    """One request on ``conn``; a connection the server closed while idle is opened again and the
    request sent once more (calmon's writes are idempotent)."""
    arrow = body is not None and body[:4] == b"\xff\xff\xff\xff"
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": ARROW if arrow else "application/json",
    }
    if arrow:
        path += "?model=bench"

    def send() -> tuple[int, bytes]:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    try:
        return send()
    except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
        conn.close()
        return send()


def send_all(
    bodies: list[bytes], path: str, clients: int, expect: int = 200
) -> tuple[float, list[dict]]:
    """POST every body with ``clients`` concurrent connections, each answered ``expect``;
    return (seconds, replies)."""
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
                if status != expect:
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


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def event_times(n: int, first: datetime, days: float) -> np.ndarray:
    """Event times of ``n`` predictions spread evenly from ``first`` over ``days`` less the last
    5 hours (the newest labels are still due), as seconds since ``first``."""
    return np.arange(n) * ((days * 86400 - 5 * 3600) / n)


def prediction_batches(
    n: int, batch: int, seed: int, first: datetime, offsets: np.ndarray
) -> Iterator[bytes]:
    """Request bodies of ``batch`` predictions each, in event-time order."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, batch):
        size = min(batch, n - start)
        logits = np.round(rng.normal(size=(size, K)) * 2, 6)
        if BODY["format"] == "arrow":
            ids = np.char.add("p", np.arange(start, start + size).astype(str))
            yield arrow_body(
                {
                    "id": pa.array(ids.tolist(), pa.string()),
                    "ts": pa.array(
                        np.datetime64(first.replace(tzinfo=None), "us")
                        + (offsets[start : start + size] * 1e6).astype("timedelta64[us]"),
                        pa.timestamp("us", "UTC"),
                    ),
                    "logits": pa.FixedSizeListArray.from_arrays(pa.array(logits.ravel()), K),
                    "region": pa.array(
                        [REGIONS[i % 3] for i in range(start, start + size)]
                    ).dictionary_encode(),
                }
            )
            continue
        items = [
            {
                "id": f"p{start + i}",
                "ts": iso(first + timedelta(seconds=float(offsets[start + i]))),
                "cohort": {"region": REGIONS[(start + i) % 3]},
                "logits": logits[i].tolist(),
            }
            for i in range(size)
        ]
        yield json.dumps({"model": "bench", "predictions": items}).encode()


LABEL_ORDERS = ("displaced", "uniform-30d", "mixture")
HOUR, DAY = 3600.0, 86400.0


def label_delays(order: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Seconds from each prediction to its label under the label order ``order``."""
    if order == "displaced":
        return rng.uniform(HOUR, 4 * HOUR, n)
    if order == "uniform-30d":
        return rng.uniform(0.0, 30 * DAY, n)
    if order == "mixture":
        late = rng.random(n) < 0.3
        return np.where(late, rng.uniform(0.0, 60 * DAY, n), rng.uniform(0.0, 4 * HOUR, n))
    raise ValueError(f"unknown label order {order!r}")


def label_plan(
    n: int,
    offsets: np.ndarray,
    seed: int,
    displaced_share: float = 0.03,
    order_name: str = "displaced",
    latest: float = float("inf"),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(early, in order, label offsets)``: indices of the 1% of labels sent before ingest, the
    others in sending order (label-time order; for ``displaced`` with ``displaced_share`` of
    them moved to random places among each other), and each label's event time as seconds after
    the first prediction (its prediction's plus its delay, at most ``latest``: a label due
    after now is sent as known now, in its place in the arrival order)."""
    rng = np.random.default_rng(seed)
    arrival = offsets + label_delays(order_name, n, rng)
    label_offsets = np.minimum(arrival, latest)
    early_mask = rng.random(n) < 0.01
    order = np.argsort(arrival, kind="stable")
    order = order[~early_mask[order]]
    if order_name == "displaced":
        displaced = rng.choice(len(order), size=int(displaced_share * len(order)), replace=False)
        order[np.sort(displaced)] = order[rng.permutation(displaced)]
    return np.flatnonzero(early_mask), order, label_offsets


def arrow_body(columns: dict[str, pa.Array]) -> bytes:
    """One Arrow IPC stream of one record batch."""
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def label_bodies(
    indices: np.ndarray, labels: np.ndarray, first: datetime, label_offsets: np.ndarray, batch: int
) -> list[bytes]:
    if BODY["format"] == "arrow":
        base = np.datetime64(first.replace(tzinfo=None), "us")
        return [
            arrow_body(
                {
                    "id": pa.array(np.char.add("p", part.astype(str)).tolist(), pa.string()),
                    "label": pa.array(labels[part].astype(np.int64)),
                    "ts": pa.array(
                        base + (label_offsets[part] * 1e6).astype("timedelta64[us]"),
                        pa.timestamp("us", "UTC"),
                    ),
                }
            )
            for part in (indices[b : b + batch] for b in range(0, len(indices), batch))
        ]
    return [
        json.dumps(
            {
                "model": "bench",
                "labels": [
                    {
                        "id": f"p{i}",
                        "label": int(labels[i]),
                        "ts": iso(first + timedelta(seconds=float(label_offsets[i]))),
                    }
                    for i in indices[b : b + batch]
                ],
            }
        ).encode()
        for b in range(0, len(indices), batch)
    ]


def synthetic_fit_body(model: str, n: int = 2000, seed: int = 1, classes: int = K) -> bytes:
    """A ``POST /v1/contracts/fit`` body for a model of ``classes`` (K = 10) classes on random
    logits."""
    rng = np.random.default_rng(seed)
    sets = {
        name: {
            "logits": np.round(rng.normal(size=(n, classes)), 6).tolist(),
            "labels": rng.integers(0, classes, n).tolist(),
        }
        for name in ("fit", "eval")
    }
    return json.dumps(
        {
            "model": model,
            "checkpoint": model,
            "task": "multiclass",
            "classes": [f"c{k}" for k in range(classes)],
            "population": "synthetic",
            "outcome": "top-label correct",
            "split": {"method": "random"},
            "data_window": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
            "method": "temperature",
            **sets,
        }
    ).encode()


REFERENCE_DDL = (
    "CREATE TABLE ceiling_reference (model text, id text, ts timestamptz, cohort jsonb,"
    " logits bytea, PRIMARY KEY (model, id))"
)


def _reference_loop(args: tuple[str, int, int, int, multiprocessing.synchronize.Barrier]) -> None:
    """One bare loop: binary COPY of ``batch`` rows into a staging table, then
    ``INSERT ... ON CONFLICT DO NOTHING`` into ``ceiling_reference``, one commit per batch."""
    url, first, rows, batch, barrier = args
    rng = np.random.default_rng(first)
    now = datetime.now(UTC)
    data = [
        (f"r{first + i}", now, '{"region": "emea"}', rng.normal(size=K).tobytes())
        for i in range(rows)
    ]
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TEMP TABLE s (id text, ts timestamptz, cohort jsonb, logits bytea)"
            " ON COMMIT DELETE ROWS"
        )
        conn.commit()
        barrier.wait()
        for offset in range(0, rows, batch):
            with conn.cursor() as cur, cur.copy("COPY s FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["text", "timestamptz", "jsonb", "bytea"])
                for row in data[offset : offset + batch]:
                    copy.write_row(row)
            conn.execute(
                "INSERT INTO ceiling_reference SELECT 'm', id, ts, cohort, logits FROM s"
                " ON CONFLICT DO NOTHING"
            )
            conn.commit()


def reference_ceiling(url: str, rows: int, batch: int, loops: int) -> float:
    """Rows/s of ``loops`` concurrent bare loops (processes) into the minimal idempotent layout."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(REFERENCE_DDL)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(loops + 1)
    share = rows // loops
    workers = [
        context.Process(target=_reference_loop, args=((url, k * share, share, batch, barrier),))
        for k in range(loops)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if any(worker.exitcode for worker in workers):
        raise RuntimeError("a reference loop failed")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE ceiling_reference")
    return share * loops / elapsed


def calmon_sql_ceilings(url: str, rows: int, batch: int) -> tuple[float, float]:
    """Rows/s of calmon's own storage statements driven directly, one connection, batches of
    ``batch``: the prediction insert and the label join that reads each
    prediction's stored inputs back. No HTTP, JSON, validation or bucket statistics."""
    from service.db.database import Database
    from service.stream import prediction_store
    from service.stream.sql.columns import PredictionColumns

    database = Database(url)
    rng = np.random.default_rng(5)
    now = datetime.now(UTC)
    ids = [f"c{i}" for i in range(rows)]
    inputs = rng.normal(size=(rows, K))
    cuts = [(offset, min(offset + batch, rows)) for offset in range(0, rows, batch)]
    predictions = [
        PredictionColumns(
            ids=sorted(ids[a:b]),
            ts=[now] * (b - a),
            cohorts=['{"region":"emea"}'] * (b - a),
            slices=['["all","region=emea"]'] * (b - a),
            inputs=inputs[a:b],
        )
        for a, b in cuts
    ]
    labels = [[(f"c{i}", i % K, None, now) for i in range(a, b)] for a, b in cuts]
    seconds = []
    for store, parts in (
        (
            lambda s, part: prediction_store.insert_predictions(s, "ceiling", "c", part, now),
            predictions,
        ),
        (lambda s, part: prediction_store.record_labels(s, "ceiling", part, now), labels),
    ):
        start = time.perf_counter()
        for part in parts:
            with database.session() as session:
                store(session, part)
                session.commit()
        seconds.append(time.perf_counter() - start)
    with database.session() as session:
        from sqlalchemy import text

        session.execute(text("DELETE FROM labels WHERE model = 'ceiling'"))
        session.execute(text("DELETE FROM predictions WHERE model = 'ceiling'"))
        session.commit()
    database.dispose()
    return rows / seconds[0], rows / seconds[1]


def table_sizes(url: str) -> str:
    """On-disk bytes (with indexes and TOAST) of the tables the streams write, per stored
    prediction, and all of them and the buckets' alone per labeled prediction."""
    tables = ("predictions", "labels", "calibration_buckets", "unfolded_label_batches")
    with psycopg.connect(url, autocommit=True) as conn:
        count = conn.execute("SELECT count(*) FROM predictions").fetchone()[0]  # type: ignore[index]
        labeled = conn.execute("SELECT count(*) FROM labels WHERE joined").fetchone()[0]  # type: ignore[index]
        sizes = {
            t: conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0]  # type: ignore[index]
            for t in tables
        }
    per_row = sum(sizes.values()) / max(count, 1)
    per_label = sum(sizes.values()) / max(labeled, 1)
    buckets = sizes["calibration_buckets"] / max(labeled, 1)
    parts = ", ".join(f"{t} {b / 2**20:,.1f} MB" for t, b in sizes.items())
    return (
        f"{parts}; {per_row:,.0f} B per stored prediction ({count:,} stored); {per_label:,.0f} B"
        f" per labeled prediction, of which buckets {buckets:,.0f} B ({labeled:,} labeled)"
    )


def bucket_writes(url: str) -> int:
    """Bucket rows inserted or updated so far (``pg_stat_user_tables``, after a pause for the
    servers' backends to publish their counts)."""
    time.sleep(1.5)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables"
            " WHERE relname = 'calibration_buckets'"
        ).fetchone()
    assert row is not None
    return int(row[0])


class Refresher(threading.Thread):
    """The service's refresher loop with a refresh interval of ``every`` seconds, run here (the
    service's own is off): the label fold ``FOLDS_PER_REFRESH`` times per interval, timed on
    its own, and the rest of the cycle (``Refresher.run_once``) once per interval."""

    def __init__(self, url: str, every: float) -> None:
        super().__init__(daemon=True)
        from service.config import load_settings
        from service.db.database import Database
        from service.export.refresher import FOLDS_PER_REFRESH
        from service.export.refresher import Refresher as ServiceRefresher

        self.db = Database(url)
        self.refresher = ServiceRefresher(self.db, load_settings({"database_url": url}))
        self.every = every
        self.folds_per_cycle = FOLDS_PER_REFRESH
        self.stopping = threading.Event()
        #: Per fold: (labels counted, seconds, lag seconds: fold end less the oldest label's
        #: acknowledgement).
        self.folds: list[tuple[int, float, float]] = []
        self.cycles: list[float] = []

    def fold(self) -> None:
        from service.common.clock import utcnow
        from service.stream import fold_store
        from service.stream.fold import fold_model

        with self.db.read_session() as session:
            status = fold_store.fold_status(session, "bench")
        start = time.perf_counter()
        with self.db.session() as session:
            counted = fold_model(session, "bench", utcnow())
        seconds = time.perf_counter() - start
        oldest = status.oldest_queued_at
        lag = 0.0 if oldest is None else (utcnow() - oldest).total_seconds()
        self.folds.append((counted, seconds, lag))

    def run(self) -> None:
        steps = 0
        while not self.stopping.wait(self.every / self.folds_per_cycle):
            steps += 1
            if steps % self.folds_per_cycle:
                self.fold()
            else:
                self.cycle()

    def cycle(self) -> None:
        self.fold()
        start = time.perf_counter()
        self.refresher.run_once()
        self.cycles.append(time.perf_counter() - start)

    def finish(self) -> None:
        self.stopping.set()
        self.join()
        self.cycle()
        self.db.dispose()

    def summary(self) -> str:
        counted = [f for f in self.folds if f[0]]
        if not counted:
            return "no label waited for the fold"
        labels = sum(f[0] for f in counted)
        seconds = sum(f[1] for f in counted)
        return (
            f"{len(counted)} folds counted {labels:,} labels in {seconds:.1f} s"
            f" ({labels / max(seconds, 1e-9):,.0f} labels/s; longest fold"
            f" {max(f[1] for f in counted):.2f} s,"
            f" most labels in one {max(f[0] for f in counted):,}); lag (fold end less the oldest"
            f" label's acknowledgement): max {max(f[2] for f in counted):.1f} s; rest of the"
            f" refresh cycle: max {max(self.cycles, default=0.0):.2f} s"
        )


def timed_gets(path: str, count: int) -> tuple[float, float, bytes]:
    """p50 and p95 milliseconds of ``count`` sequential GETs of ``path``, and the last body."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    latencies = []
    raw = b""
    for _ in range(count):
        start = time.perf_counter()
        status, raw = call(conn, "GET", path)
        latencies.append((time.perf_counter() - start) * 1000)
        assert status == 200, raw[:300]
    p50, p95 = np.percentile(latencies, [50, 95])
    return float(p50), float(p95), raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictions", type=int, default=10_000_000)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ceiling-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--displaced", type=float, default=0.03, help="share of the labels sent out of order"
    )
    parser.add_argument("--label-order", choices=LABEL_ORDERS, default="displaced")
    parser.add_argument(
        "--fold-every",
        type=float,
        default=30.0,
        help="the refresh interval: a fold every third of it, the rest of the cycle once",
    )
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument(
        "--body", choices=("json", "arrow"), default="json", help="the batches' body format"
    )
    args = parser.parse_args()
    BODY["format"] = args.body
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name, url = fresh_database(base)
    service = start_service(url, args.workers, args.threads)
    phases: list[tuple[str, Counters]] = []

    def measured(label: str, action):  # type: ignore[no-untyped-def]
        before = snapshot(url, service.pid)
        result = action()
        phases.append((label, between(before, snapshot(url, service.pid))))
        return result

    n = args.predictions
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        status, raw = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body("bench"))
        assert status == 201, raw
        now = datetime.now(UTC).replace(microsecond=0)
        first = now - timedelta(days=args.days) + timedelta(minutes=1)
        offsets = event_times(n, first, args.days)
        labels = np.random.default_rng(3).integers(0, K, n)
        early, in_order, label_offsets = label_plan(
            n,
            offsets,
            4,
            args.displaced,
            args.label_order,
            latest=(now - first).total_seconds() - 60,
        )
        _, replies = send_all(
            label_bodies(early, labels, first, label_offsets, args.batch), "/v1/labels", 2
        )
        assert sum(r["pending"] for r in replies) == len(early)

        chunk = max(args.batch, 1_000_000 // args.batch * args.batch)
        ingest_seconds = 0.0
        first_bodies: list[bytes] = []
        generator = prediction_batches(n, args.batch, 2, first, offsets)
        for sent in range(0, n, chunk):
            bodies = list(itertools.islice(generator, chunk // args.batch))
            first_bodies = first_bodies or bodies[:20]
            seconds, replies = measured(
                "ingest", lambda b=bodies: send_all(b, "/v1/predictions", args.clients)
            )
            assert sum(r["accepted"] for r in replies) == min(chunk, n - sent)
            ingest_seconds += seconds
            done = min(sent + chunk, n)
            print(f"ingested {done:,} ({done / ingest_seconds:,.0f}/s so far)", flush=True)
        ingest_rate = n / ingest_seconds
        seconds, replies = measured(
            "retry", lambda: send_all(first_bodies, "/v1/predictions", args.clients)
        )
        retry_rate = sum(r["duplicates"] for r in replies) / seconds

        refresher = Refresher(url, args.fold_every)
        writes_before = bucket_writes(url)
        refresher.start()
        label_seconds = 0.0
        for offset in range(0, len(in_order), chunk):
            part = in_order[offset : offset + chunk]
            bodies = label_bodies(part, labels, first, label_offsets, args.batch)
            seconds, replies = measured(
                "label join", lambda b=bodies: send_all(b, "/v1/labels", args.clients)
            )
            assert sum(r["joined"] for r in replies) == len(part)
            label_seconds += seconds
            done = offset + len(part)
            print(f"labeled {done:,} ({done / label_seconds:,.0f}/s so far)", flush=True)
        label_rate = len(in_order) / label_seconds
        measured("label fold", refresher.finish)
        rows_per_label = (bucket_writes(url) - writes_before) / len(in_order)
        wal_per_label = sum(
            c.wal_bytes for label, c in phases if label in ("label join", "label fold")
        ) / len(in_order)

        q = args.queries
        day = measured("reads", lambda: timed_gets("/v1/models/bench/calibration?window=24h", q))
        everything = f"start={iso(first)}&end={iso(now)}"
        whole = measured(
            "reads", lambda: timed_gets(f"/v1/models/bench/calibration?{everything}", q)
        )
        counted = json.loads(whole[2])["n_labeled"]
        if counted != n:
            print(
                f"WARNING: the reading over every event time counts {counted:,} labeled", flush=True
            )
        history = measured(
            "reads",
            lambda: timed_gets(
                f"/v1/models/bench/history?start={iso(now - timedelta(days=30))}"
                f"&end={iso(now)}&step=1h",
                q,
            ),
        )
        metrics = measured("reads", lambda: timed_gets("/metrics", q))

        rows = min(n, args.ceiling_rows)
        one_loop = measured(
            "ceiling: reference, 1 loop", lambda: reference_ceiling(url, rows, args.batch, 1)
        )
        loops = measured(
            f"ceiling: reference, {args.workers} loops",
            lambda: reference_ceiling(url, rows, args.batch, args.workers),
        )
        own_ingest, own_labels = measured(
            "ceiling: calmon SQL", lambda: calmon_sql_ceilings(url, rows, args.batch)
        )
        settings = server_settings(url)
        sizes = table_sizes(url)
    finally:
        service.terminate()
        service.wait(timeout=60)
        if not args.keep:
            drop_database(base, name)
    merged: dict[str, Counters] = {}
    for label, counters in phases:
        merged[label] = (
            counters
            if label not in merged
            else Counters(
                *(
                    a + b
                    for a, b in zip(
                        vars(merged[label]).values(), vars(counters).values(), strict=True
                    )
                )
            )
        )
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}; {n:,} predictions over {args.days:g} days,"
        f" batches of {args.batch:,}, {args.workers} workers of {args.threads} thread(s),"
        f" {args.clients} clients, label order {args.label_order}"
        f" ({args.displaced:.0%} displaced when 'displaced'), {args.body} bodies\n"
        f"server: {settings}\nsize: {sizes}\n"
        f"labels: {rows_per_label:.2f} bucket rows written per label, {wal_per_label:,.0f} B of"
        f" WAL per label (server-wide); fold: {refresher.summary()}\n"
    )
    rows_text = [
        (
            "ingest over HTTP",
            f"{ingest_rate:,.0f}/s",
            f"{one_loop:,.0f}/s reference layout, 1 loop",
            f"{ingest_rate / one_loop:.2f}",
            ">= 0.85",
        ),
        (
            "",
            "",
            f"{loops:,.0f}/s reference layout, {args.workers} loops",
            f"{ingest_rate / loops:.2f}",
            "",
        ),
        (
            "",
            "",
            f"{own_ingest:,.0f}/s calmon's own insert, bare",
            f"{ingest_rate / own_ingest:.2f}",
            "",
        ),
        ("idempotent retry (all duplicates)", f"{retry_rate:,.0f}/s", "", "", ""),
        (
            f"label join over HTTP, {n:,} stored",
            f"{label_rate:,.0f}/s",
            f"{ingest_rate:,.0f}/s ingest of this run",
            f"{label_rate / ingest_rate:.2f}",
            ">= 1.0",
        ),
        (
            "",
            "",
            f"{own_labels:,.0f}/s calmon's own label join, bare",
            f"{label_rate / own_labels:.2f}",
            "",
        ),
        ("GET calibration, 24h", f"p50 {day[0]:.1f} ms, p95 {day[1]:.1f} ms", "", "", ""),
        (
            f"GET calibration, all {args.days:g} days ({counted:,} labeled)",
            f"p50 {whole[0]:.1f} ms, p95 {whole[1]:.1f} ms",
            "",
            "",
            "",
        ),
        (
            "GET history, 30d at 1h",
            f"p50 {history[0]:.1f} ms, p95 {history[1]:.1f} ms",
            "",
            "",
            "p95 <= 100 ms",
        ),
        ("GET /metrics", f"p50 {metrics[0]:.1f} ms, p95 {metrics[1]:.1f} ms", "", "", ""),
    ]
    print("| figure | measured | same-run ceiling | ratio | target |")
    print("|---|---|---|---|---|")
    for row in rows_text:
        print("| " + " | ".join(row) + " |")
    print()
    print(phase_table(list(merged.items())))


if __name__ == "__main__":
    main()
