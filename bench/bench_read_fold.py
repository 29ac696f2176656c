"""Benchmark reads while labels wait for the fold: the fold a read runs first, and reads above
the limit it folds up to.

    python bench/bench_read_fold.py [--predictions 200000] [--days 30] [--others 3] [--queries 50]

Starts ``calmon serve`` (2 sync workers, refresher off, so nothing folds but the reads) on a
fresh PostgreSQL database next to ``CALMON_BENCH_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), or with ``--sqlite`` on a SQLite file, fits the
model ``bench`` and ``--others`` more, stores ``--predictions`` predictions of ``bench`` (K = 10,
one cohort key) over ``--days`` days and 20,000 of each other model, then queues late labels:
labels of random predictions more than a day old, sent in requests of 1,000, so that nearly
every label is alone in its 5-minute bucket and waits for the fold. Each other model keeps
10,000 labels waiting throughout. Then:

1. a read that folds: with ``--fold-sizes`` labels of ``bench`` waiting (10, 100, 1,000 and
   10,000), the latency of the whole-range reading that folds them first (``--repeats`` times
   each; above ``READ_FOLD_LIMIT`` asked with ``consistent=true``, as a read would not fold);
2. steady arrival: a request of ``--arrival`` late labels before each 24 h reading, p50/p95;
3. nothing waiting for ``bench`` (every label sent so far counted): p50/p95 of the 24 h and
   whole-range readings and of the 30-day history at 1 h steps;
4. the queue full: 10,000 labels of ``bench`` waiting (above ``READ_FOLD_LIMIT``), p50/p95 of
   the three reads of phase 3 (each states ``labels_unfolded`` and folds nothing).

Every reply is checked: a read that folds counts every label sent before it, one above the
limit states every waiting label.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_stream import (
    PORT,
    REGIONS,
    call,
    drop_database,
    fresh_database,
    iso,
    send_all,
    start_service,
    synthetic_fit_body,
)

from service.stream.fold import READ_FOLD_LIMIT

K = 10
#: Labels waiting for each other model throughout, and for ``bench`` in the last phase.
FULL = 10_000


class Stream:
    """The predictions of one model (``n`` of them over ``days`` days before ``now``) and which
    of them are labeled yet."""

    def __init__(self, model: str, n: int, days: float, now: datetime, seed: int) -> None:
        self.model, self.n, self.now = model, n, now
        self.first = now - timedelta(days=days)
        self.offsets = np.sort(np.random.default_rng(seed).uniform(0, days * 86400, n))
        self.rng = np.random.default_rng(seed + 1)
        # Predictions over a day old: their labels may wait (younger ones are counted at once).
        cutoff = days * 86400 - 25 * 3600
        self.unlabeled = self.rng.permutation(np.flatnonzero(self.offsets < cutoff))

    def prediction_bodies(self, batch: int = 10_000) -> list[bytes]:
        rng = np.random.default_rng(7)
        bodies = []
        for start in range(0, self.n, batch):
            size = min(batch, self.n - start)
            logits = np.round(rng.normal(size=(size, K)) * 2, 6)
            items = [
                {
                    "id": f"p{start + i}",
                    "ts": iso(self.first + timedelta(seconds=float(self.offsets[start + i]))),
                    "cohort": {"region": REGIONS[(start + i) % 3]},
                    "logits": logits[i].tolist(),
                }
                for i in range(size)
            ]
            bodies.append(json.dumps({"model": self.model, "predictions": items}).encode())
        return bodies

    def late_label_bodies(self, count: int, batch: int = 1_000) -> list[bytes]:
        """Bodies of ``count`` labels of predictions not labeled yet, over a day old."""
        if count > len(self.unlabeled):
            raise RuntimeError(f"{self.model}: only {len(self.unlabeled)} predictions left")
        chosen, self.unlabeled = self.unlabeled[:count], self.unlabeled[count:]
        ts = iso(datetime.now(UTC))
        return [
            json.dumps(
                {
                    "model": self.model,
                    "labels": [
                        {"id": f"p{i}", "label": int(self.rng.integers(0, K)), "ts": ts}
                        for i in chosen[b : b + batch]
                    ],
                }
            ).encode()
            for b in range(0, count, batch)
        ]


def queue_labels(stream: Stream, count: int) -> None:
    """Send ``count`` late labels of ``stream`` and check they are all acknowledged."""
    _, replies = send_all(stream.late_label_bodies(count), "/v1/labels", 2)
    assert sum(r["joined"] for r in replies) == count, replies[:1]


def timed(conn: http.client.HTTPConnection, path: str) -> tuple[float, dict]:
    """Milliseconds of one GET of ``path`` and its reply."""
    start = time.perf_counter()
    status, raw = call(conn, "GET", path)
    elapsed = (time.perf_counter() - start) * 1000
    assert status == 200, raw[:300]
    return elapsed, json.loads(raw)


def percentiles(latencies: list[float]) -> str:
    p50, p95 = np.percentile(latencies, [50, 95])
    return f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictions", type=int, default=200_000)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--others", type=int, default=3)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arrival", type=int, default=10)
    parser.add_argument(
        "--fold-sizes",
        default="10,100,1000,10000",
        help="comma-separated counts of waiting labels a read folds (above the limit, asked"
        " with consistent=true)",
    )
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    folder = tempfile.TemporaryDirectory()
    if args.sqlite:
        name, url = "", f"sqlite:///{folder.name}/bench.db"
    else:
        name, url = fresh_database(base)
    service = start_service(url, 2, 1)
    rows: list[tuple[str, str]] = []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        now = datetime.now(UTC).replace(microsecond=0)
        bench = Stream("bench", args.predictions, args.days, now, seed=1)
        others = [
            Stream(f"other{i}", 20_000, args.days, now, seed=10 + i) for i in range(args.others)
        ]
        for stream in (bench, *others):
            status, raw = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body(stream.model))
            assert status == 201, raw[:300]
            send_all(stream.prediction_bodies(), "/v1/predictions", 2)
        for stream in others:
            queue_labels(stream, FULL)
        print(f"stored; {args.others} x {FULL:,} labels of other models wait", flush=True)

        reads = {
            "calibration 24h": "/v1/models/bench/calibration?window=24h",
            f"calibration {args.days:g} days": "/v1/models/bench/calibration?"
            f"start={iso(bench.first)}&end={iso(now)}",
            "history 30 days at 1h": "/v1/models/bench/history?"
            f"start={iso(now - timedelta(days=30))}&end={iso(now)}&step=1h",
        }
        day = reads["calibration 24h"]
        whole = reads[f"calibration {args.days:g} days"]

        def phase(label: str, paths: dict[str, str], check: Callable[[dict], None]) -> None:
            for what, path in paths.items():
                latencies = []
                for _ in range(args.queries):
                    ms, reply = timed(conn, path)
                    check(reply)
                    latencies.append(ms)
                rows.append((f"{label}: {what}", percentiles(latencies)))
                print(rows[-1], flush=True)

        def unfolded(low: int, high: int) -> Callable[[dict], None]:
            """A check that a reply states between ``low`` and ``high`` labels unfolded."""

            def check(reply: dict) -> None:
                found = reply["points"][0] if "points" in reply else reply
                assert low <= found["labels_unfolded"] <= high, (found["labels_unfolded"], low)

            return check

        labeled = 0
        for size in (int(v) for v in args.fold_sizes.split(",")):
            # Above the limit a read folds nothing; consistent=true shows what folding costs.
            asked = "" if size <= READ_FOLD_LIMIT else "&consistent=true"
            latencies = []
            for _ in range(args.repeats):
                queue_labels(bench, size)
                labeled += size
                ms, reply = timed(conn, whole + asked)
                assert (reply["n_labeled"], reply["labels_unfolded"]) == (labeled, 0), reply
                latencies.append(ms)
            rows.append(
                (
                    f"whole-range read folding {size:,} waiting labels"
                    + (" (consistent=true)" if asked else ""),
                    ", ".join(f"{ms:.0f}" for ms in latencies) + " ms",
                )
            )
            print(rows[-1], flush=True)
        latencies = []
        for _ in range(args.queries):
            queue_labels(bench, args.arrival)
            labeled += args.arrival
            ms, reply = timed(conn, day)
            assert reply["labels_unfolded"] == 0, reply
            latencies.append(ms)
        _, reply = timed(conn, whole)
        assert reply["n_labeled"] == labeled, (reply["n_labeled"], labeled)
        rows.append(
            (f"24h read after each request of {args.arrival} late labels", percentiles(latencies))
        )
        print(rows[-1], flush=True)
        phase("nothing waiting", reads, unfolded(0, 0))
        above = max(FULL, READ_FOLD_LIMIT + 1)
        queue_labels(bench, above)
        phase(f"{above:,} waiting (above the limit)", reads, unfolded(READ_FOLD_LIMIT + 1, above))
    finally:
        service.terminate()
        service.wait(30)
        if args.keep:
            print(f"kept {url}")
        elif name:
            drop_database(base, name)
        folder.cleanup()
    backend = "SQLite" if args.sqlite else "PostgreSQL"
    print(f"\n{backend}, {args.predictions:,} predictions of bench over {args.days:g} days\n")
    print("| read | latency |\n|---|---|")
    for what, figure in rows:
        print(f"| {what} | {figure} |")


if __name__ == "__main__":
    main()
