"""Benchmark what an Arrow body's shape costs: hostile bodies of up to 16 MiB against a
well-formed 16 MiB batch, and how long another client's 1-row write waits meanwhile, on SQLite
and PostgreSQL.

    python bench/bench_arrow_bodies.py [--backend sqlite|postgresql|both] [--reps 3]
                                       [--shapes well-formed,many-columns,...]

Starts ``calmon serve`` (2 sync gunicorn workers, port ``CALMON_BENCH_PORT``) on a fresh
database: a SQLite file in a temporary directory, or a PostgreSQL database created next to
``CALMON_BENCH_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``) and
dropped after. A contract with K = 16 classes is fitted; requests carry a stored ``ingest``
token, as a deployed client's would (resolving it reads the database). Each shape's body is
built before the clock starts and sent ``--reps`` times (fresh prediction ids each time; in
rounds of every shape), each time while a second client sends 1-row JSON predictions one after
another. Prints per shape the body's size, the reply's status, the median time to the reply and
the longest 1-row write that overlapped it, each also over the well-formed batch's median time
(the target: at most 2).

The well-formed batch is 100,000 predictions (the item limit) of K = 16 logits, a timestamp
and one dictionary-encoded cohort key: 15.3 MB, the largest such batch under the 16 MiB body
limit.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import (
    PORT,
    TOKEN,
    drop_database,
    fresh_database,
    start_service,
    synthetic_fit_body,
)

K = 16
ROWS = 100_000
LIMIT = 16 * 1024 * 1024
ARROW = "application/vnd.apache.arrow.stream"
NOW = datetime.now(UTC).replace(microsecond=0)


def stream(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    """One Arrow IPC stream of ``batches``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue())


def one_stream(table: pa.Table) -> bytes:
    return stream(table.schema, table.combine_chunks().to_batches())


def prediction_table(prefix: str, n: int, seed: int = 1) -> pa.Table:
    """``n`` valid predictions with ids ``{prefix}{i}``, times 10 minutes before the run's start
    and a cohort key of three values."""
    rng = np.random.default_rng(seed)
    micros = int((NOW - timedelta(minutes=10)).timestamp() * 1e6)
    return pa.table(
        {
            "id": pa.array([f"{prefix}{i}" for i in range(n)], pa.string()),
            "ts": pa.array(np.full(n, micros), pa.timestamp("us", "UTC")),
            "logits": pa.FixedSizeListArray.from_arrays(
                pa.array(np.round(rng.normal(size=n * K) * 2, 6)), K
            ),
            "region": pa.array(
                ["emea", "apac", "amer"] * (n // 3) + ["emea"] * (n % 3)
            ).dictionary_encode(),
        }
    )


def well_formed(prefix: str) -> bytes:
    return one_stream(prediction_table(prefix, ROWS))


def two_streams(prefix: str) -> bytes:
    """Two complete streams of 50,000 predictions each, one after the other."""
    table = prediction_table(prefix, ROWS)
    return one_stream(table.slice(0, ROWS // 2)) + one_stream(table.slice(ROWS // 2))


def _filled(build: Callable[[int], bytes], unit: int) -> bytes:
    """``build(n)`` for the largest ``n`` (a multiple of ``unit``, estimated from a small body)
    whose body is at most ``LIMIT`` bytes."""
    small = len(build(unit))
    n = unit * max(1, int((LIMIT - 4096) / (len(build(2 * unit)) - small)))
    body = build(n)
    while len(body) > LIMIT:
        n -= unit
        body = build(n)
    return body


def many_columns(prefix: str) -> bytes:
    """One prediction and as many further 1-row columns as fit."""
    base = prediction_table(prefix, 1).drop_columns(["region"])

    def build(n: int) -> bytes:
        extra = pa.array([1], pa.int8())
        table = pa.Table.from_arrays(
            [*base.columns, *([extra] * n)],
            names=[*base.column_names, *(f"c{i}" for i in range(n))],
        )
        return one_stream(table)

    return _filled(build, 1000)


def struct_of_many_fields(prefix: str) -> bytes:
    """One prediction whose cohort column is a struct of as many fields as fit."""
    base = prediction_table(prefix, 1).drop_columns(["region"])

    def build(n: int) -> bytes:
        region = pa.StructArray.from_arrays(
            [pa.array([1], pa.int8())] * n, [f"f{i}" for i in range(n)]
        )
        return one_stream(base.append_column("region", region))

    return _filled(build, 1000)


def deep_nesting(prefix: str) -> bytes:
    """One prediction whose cohort column is a list nested 60 deep around 16 MB of bytes."""
    base = prediction_table(prefix, 1).drop_columns(["region"])
    inner: pa.Array = pa.array(np.zeros(LIMIT - 8192, dtype=np.int8))
    inner = pa.ListArray.from_arrays(pa.array([0, len(inner)], pa.int32()), inner)
    for _ in range(59):
        inner = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), inner)
    return one_stream(base.append_column("region", inner))


def one_row_batches(prefix: str) -> bytes:
    """Valid predictions, one record batch each, as many as fit."""

    def build(n: int) -> bytes:
        table = prediction_table(prefix, n)
        table = table.set_column(3, "region", table.column("region").cast(pa.string()))
        return stream(table.schema, table.to_batches(max_chunksize=1))

    return _filled(build, 100)


def empty_batches(prefix: str) -> bytes:
    """As many record batches of no rows as fit, then one prediction."""
    table = prediction_table(prefix, 1)
    empty = table.slice(0, 0).to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]

    def build(n: int) -> bytes:
        return stream(table.schema, empty * n + table.to_batches())

    return _filled(build, 100)


def dictionary_batches(prefix: str) -> bytes:
    """Valid 1-row batches, each with a dictionary of its own (a dictionary batch before every
    record batch), as many as fit."""

    def build(n: int) -> bytes:
        table = prediction_table(prefix, n)
        batches = []
        for i, batch in enumerate(table.to_batches(max_chunksize=1)):
            region = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array([f"r{i}"]))
            batches.append(batch.set_column(3, "region", region))
        return stream(batches[0].schema, batches)

    return _filled(build, 100)


def long_string(prefix: str) -> bytes:
    """One prediction whose id is a 16 MB string."""
    table = prediction_table(prefix, 1)
    return one_stream(table.set_column(0, "id", pa.array([prefix + "x" * (LIMIT - 8192)])))


def every_row_invalid(prefix: str) -> bytes:
    """100,000 predictions, each with a NaN logit."""
    table = prediction_table(prefix, ROWS)
    logits = table.column("logits").combine_chunks().flatten().to_numpy().copy()
    logits[::K] = np.nan
    return one_stream(
        table.set_column(2, "logits", pa.FixedSizeListArray.from_arrays(pa.array(logits), K))
    )


def last_row_invalid(prefix: str) -> bytes:
    """100,000 predictions, the last with an empty id."""
    table = prediction_table(prefix, ROWS)
    ids = table.column("id").to_pylist()
    ids[-1] = ""
    return one_stream(table.set_column(0, "id", pa.array(ids)))


def distinct_cohorts(prefix: str) -> bytes:
    """50,000 valid predictions with 8 cohort keys, every value distinct."""
    table = prediction_table(prefix, ROWS // 2).drop_columns(["region"])
    for key in range(8):
        table = table.append_column(f"k{key}", pa.array([f"{key}-{i}" for i in range(ROWS // 2)]))
    return one_stream(table)


def invalid_labels(prefix: str) -> bytes:
    """100,000 labels of 150-character ids, each naming a class index past K."""
    micros = int((NOW - timedelta(minutes=5)).timestamp() * 1e6)
    table = pa.table(
        {
            "id": pa.array([f"{prefix}{i:0>140}" for i in range(ROWS)]),
            "label": pa.array(np.full(ROWS, K + 1), pa.int32()),
            "ts": pa.array(np.full(ROWS, micros), pa.timestamp("us", "UTC")),
        }
    )
    return one_stream(table)


@dataclass(frozen=True)
class Shape:
    build: Callable[[str], bytes]
    path: str = "/v1/predictions"


SHAPES = {
    "well-formed": Shape(well_formed),
    "two-streams": Shape(two_streams),
    "many-columns": Shape(many_columns),
    "wide-struct": Shape(struct_of_many_fields),
    "deep-nesting": Shape(deep_nesting),
    "one-row-batches": Shape(one_row_batches),
    "empty-batches": Shape(empty_batches),
    "dictionary-batches": Shape(dictionary_batches),
    "long-string": Shape(long_string),
    "every-row-invalid": Shape(every_row_invalid),
    "last-row-invalid": Shape(last_row_invalid),
    "distinct-cohorts": Shape(distinct_cohorts),
    "invalid-labels": Shape(invalid_labels, "/v1/labels"),
}


def post(path: str, body: bytes, token: str, media: str) -> tuple[int, bytes]:
    """One request on a connection of its own (sync workers close theirs after each reply)."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    try:
        conn.request(
            "POST",
            path,
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": media},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@dataclass(eq=False)
class Writer(threading.Thread):
    """Sends 1-row JSON predictions one after another until stopped; keeps each request's start
    and end (``time.perf_counter``) and status."""

    token: str
    prefix: str
    done: threading.Event = field(default_factory=threading.Event)
    spans: list[tuple[float, float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            item = {
                "id": f"{self.prefix}{i}",
                "ts": (NOW - timedelta(minutes=10)).isoformat(),
                "cohort": {"region": "emea"},
                "logits": [0.0] * K,
            }
            body = json.dumps({"model": "bench", "predictions": [item]}).encode()
            began = time.perf_counter()
            status, _ = post("/v1/predictions", body, self.token, "application/json")
            self.spans.append((began, time.perf_counter(), status))
            i += 1

    def longest_within(self, start: float, end: float) -> tuple[float, int]:
        """The longest request that overlapped ``[start, end]``, and how many did."""
        overlapping = [b - a for a, b, _ in self.spans if b >= start and a <= end]
        return max(overlapping, default=0.0), len(overlapping)

    def statuses(self) -> set[int]:
        return {s for _, _, s in self.spans}


@dataclass
class Result:
    size: int
    statuses: set[int]
    seconds: list[float]
    waits: list[float]
    writes: int
    write_statuses: set[int]
    reply: str


def ingest_token(url: str) -> str:
    calmon = str(Path(sys.executable).parent / "calmon")
    out = subprocess.run(
        [calmon, "token", "create", "--role", "ingest", "--name", "bench-ingest"],
        env={**os.environ, "CALMON_DATABASE_URL": url},
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def measure(shape: str, rep: int, token: str, result: Result) -> None:
    """Send ``shape``'s body once (its ``rep``-th time) beside a 1-row writer; add to
    ``result``."""
    spec = SHAPES[shape]
    prefix = f"{list(SHAPES).index(shape):02d}{rep}-"
    body = spec.build(prefix)
    result.size = len(body)
    writer = Writer(token, f"w{prefix}")
    writer.start()
    time.sleep(0.3)
    start = time.perf_counter()
    status, reply = post(f"{spec.path}?model=bench", body, token, ARROW)
    end = time.perf_counter()
    time.sleep(0.1)
    writer.done.set()
    writer.join()
    longest, count = writer.longest_within(start, end)
    result.statuses.add(status)
    result.seconds.append(end - start)
    result.waits.append(longest)
    result.writes += count
    result.write_statuses |= writer.statuses()
    result.reply = reply.decode(errors="replace")[:160]


def run_backend(backend: str, shapes: list[str], reps: int) -> dict[str, Result]:
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    with tempfile.TemporaryDirectory() as tmp:
        name = None
        if backend == "postgresql":
            name, url = fresh_database(base)
        else:
            url = f"sqlite:///{Path(tmp) / 'calmon.db'}"
        proc = start_service(url, workers=2, threads=1)
        try:
            status, reply = post(
                "/v1/contracts/fit",
                synthetic_fit_body("bench", 1000, classes=K),
                TOKEN,
                "application/json",
            )
            if status not in (200, 201):
                raise RuntimeError(f"fit: {status} {reply[:300]!r}")
            token = ingest_token(url)
            results = {shape: Result(0, set(), [], [], 0, set(), "") for shape in shapes}
            # Rounds of every shape, so that each shape's times spread over the run as the
            # well-formed batch's do (other work on the machine comes and goes).
            for rep in range(reps):
                for shape in shapes:
                    measure(shape, rep, token, results[shape])
            return results
        finally:
            proc.terminate()
            proc.wait()
            if name is not None:
                drop_database(base, name)


def table(results: dict[str, dict[str, Result]]) -> str:
    backends = list(results)
    head = "| shape | bytes | " + " | ".join(
        f"{b}: status, time, ratio, longest 1-row write, ratio" for b in backends
    )
    lines = [head + " |", "|---|---|" + "---|" * len(backends)]
    for shape in next(iter(results.values())):
        cells = []
        for backend in backends:
            r = results[backend][shape]
            well = statistics.median(results[backend]["well-formed"].seconds)
            median = statistics.median(r.seconds)
            wait = max(r.waits)
            statuses = "/".join(map(str, sorted(r.statuses)))
            cells.append(
                f"{statuses}, {median:.2f} s, {median / well:.2f}, {wait:.2f} s, {wait / well:.2f}"
            )
        size = next(iter(results.values()))[shape].size
        lines.append(f"| {shape} | {size:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if "well-formed" not in shapes:
        shapes.insert(0, "well-formed")
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    results = {b: run_backend(b, shapes, args.reps) for b in backends}
    print(table(results))
    for backend, by_shape in results.items():
        for shape, r in by_shape.items():
            print(
                f"{backend} {shape}: {r.writes} overlapping writes, statuses"
                f" {sorted(r.write_statuses)}; reply {r.reply}"
            )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
        f" pyarrow {pa.__version__}; {datetime.now(UTC).date()}; commit {commit}"
    )


if __name__ == "__main__":
    main()
