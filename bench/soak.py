"""Soak: both streams, readings and scrapes against calmon on PostgreSQL for minutes.

    python bench/soak.py [--seconds 600] [--rate 25000] [--ingesters 2] [--labelers 2] [--threads 4]

Starts ``calmon serve`` (2 workers of ``--threads`` threads, refresher every 5 s) on a fresh
database next to ``CALMON_BENCH_DATABASE_URL`` and runs, all at once: ingest clients posting
batches of 2,000 predictions (K = 10) paced together at ``--rate`` predictions/s (sending at
once when behind), label clients posting the labels of every acknowledged batch 3 s later, a
reader asking for a cohort's reading every 100 ms and a scraper reading /metrics every second.
Reports throughput, latency percentiles, errors (target 0), the service's memory (RSS of the
gunicorn master and workers) sampled through the run, and whether the stored counts equal what
was acknowledged.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import (
    PORT,
    call,
    drop_database,
    fresh_database,
    start_service,
    synthetic_fit_body,
)
from pgstats import between, phase_table, process_tree, server_settings, snapshot

K = 10
BATCH = 2000


def rss_mib(master: int) -> float:
    """Resident memory of the gunicorn master and its workers, MiB."""
    total = 0
    for pid in process_tree(master):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Recorder:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.items: dict[str, int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def reset(self) -> None:
        """Forget everything recorded so far (the warm-up)."""
        with self.lock:
            self.latency.clear()
            self.items.clear()
            self.errors.clear()

    def record(self, name: str, seconds: float, items: int, ok: bool) -> None:
        with self.lock:
            self.latency[name].append(seconds * 1000)
            self.items[name] += items if ok else 0
            self.errors[name] += 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--rate", type=float, default=25_000, help="predictions/s, all ingesters")
    parser.add_argument("--ingesters", type=int, default=2)
    parser.add_argument("--labelers", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=4, help="threads per worker (readers share the workers)"
    )
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name, url = fresh_database(base)
    os.environ["CALMON_REFRESH_SECONDS"] = "5"
    service = start_service(url, 2, args.threads)
    recorder = Recorder()
    stop = threading.Event()
    produced: list[tuple[float, list[str]]] = []
    produced_lock = threading.Lock()
    acknowledged = {"predictions": 0, "labels": 0}
    interval = BATCH * args.ingesters / args.rate
    rng = np.random.default_rng(0)
    fragments = [json.dumps(np.round(rng.normal(size=K) * 2, 4).tolist()) for _ in range(BATCH)]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        status, raw = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body("soak"))
        assert status == 201, raw

        def ingester(k: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
            n = 0
            regions = ("emea", "apac", "amer")
            due = time.monotonic() + k * interval / args.ingesters
            while not stop.is_set():
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                due = max(due + interval, time.monotonic() - interval)
                ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
                ids = [f"i{k}-{n}-{i}" for i in range(BATCH)]
                rows = ",".join(
                    f'{{"id":"{ids[i]}","ts":"{ts}","cohort":{{"region":"{regions[i % 3]}"}},'
                    f'"logits":{fragments[i]}}}'
                    for i in range(BATCH)
                )
                body = f'{{"model":"soak","predictions":[{rows}]}}'.encode()
                start = time.perf_counter()
                status, raw = call(conn, "POST", "/v1/predictions", body)
                recorder.record(
                    "POST /v1/predictions", time.perf_counter() - start, BATCH, status == 200
                )
                if status == 200:
                    with produced_lock:
                        acknowledged["predictions"] += json.loads(raw)["accepted"]
                        produced.append((time.monotonic(), ids))
                n += 1

        def labeler() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
            while not (stop.is_set() and draining.is_set() and not produced):
                with produced_lock:
                    ready = [
                        p for p in produced[:2] if draining.is_set() or time.monotonic() - p[0] > 3
                    ]
                    for p in ready:
                        produced.remove(p)
                if not ready:
                    time.sleep(0.05)
                    continue
                ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
                for _, ids in ready:
                    body = json.dumps(
                        {
                            "model": "soak",
                            "labels": [{"id": i, "label": int(hash(i) % K), "ts": ts} for i in ids],
                        }
                    ).encode()
                    start = time.perf_counter()
                    status, raw = call(conn, "POST", "/v1/labels", body)
                    recorder.record(
                        "POST /v1/labels", time.perf_counter() - start, len(ids), status == 200
                    )
                    if status == 200:
                        reply = json.loads(raw)
                        with produced_lock:
                            acknowledged["labels"] += reply["joined"] + reply["pending"]

        def poller(path: str, pause: float) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
            while not stop.is_set():
                start = time.perf_counter()
                status, _ = call(conn, "GET", path, None)
                recorder.record(
                    f"GET {path.split('?')[0]}", time.perf_counter() - start, 1, status == 200
                )
                time.sleep(pause)

        draining = threading.Event()
        ingesters = [threading.Thread(target=ingester, args=(k,)) for k in range(args.ingesters)]
        labelers = [threading.Thread(target=labeler) for _ in range(args.labelers)]
        threads = ingesters + labelers
        threads += [
            threading.Thread(
                target=poller,
                args=("/v1/models/soak/calibration?window=1h&cohort=region:emea", 0.1),
            ),
            threading.Thread(target=poller, args=("/metrics", 1.0)),
        ]
        for t in threads:
            t.start()
        time.sleep(min(15, args.seconds / 4))
        memory = [rss_mib(service.pid)]
        started = time.monotonic()
        recorder.reset()
        before = snapshot(url, service.pid)
        while time.monotonic() - started < args.seconds:
            time.sleep(min(30, args.seconds / 10))
            memory.append(rss_mib(service.pid))
        elapsed = time.monotonic() - started
        machine = between(before, snapshot(url, service.pid))
        stop.set()
        for t in ingesters:
            t.join()
        draining.set()
        for t in threads:
            t.join()
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        status, raw = call(conn, "GET", "/v1/models/soak/calibration?window=24h", None)
        assert status == 200, raw
        stored = json.loads(raw)
        settings = server_settings(url)
    finally:
        service.terminate()
        service.wait(timeout=60)
        drop_database(base, name)
    counted = (stored["n_predictions"], stored["n_labeled"])
    agree = (
        "equal" if counted == (acknowledged["predictions"], acknowledged["labels"]) else "DIFFER"
    )
    print(
        f"\nsoak: {elapsed:.0f} s on {platform.machine()}, {os.cpu_count()} cores, paced at"
        f" {args.rate:,.0f} predictions/s\nserver: {settings}\nservice RSS MiB, every"
        f" {min(30, args.seconds / 10):.0f} s: {' '.join(f'{m:.0f}' for m in memory)}\n"
        f"acknowledged {acknowledged['predictions']:,} predictions and"
        f" {acknowledged['labels']:,} labels; the 24h reading counts"
        f" {stored['n_predictions']:,} predictions, {stored['n_labeled']:,} labeled"
        f" ({agree})\n"
    )
    print("| endpoint | requests | items/s | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|")
    for name_ in sorted(recorder.latency):
        lat = np.array(recorder.latency[name_])
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        print(
            f"| {name_} | {lat.size} | {recorder.items[name_] / elapsed:,.0f} | {p50:.1f} | "
            f"{p95:.1f} | {p99:.1f} | {recorder.errors[name_]} |"
        )
    print()
    print(phase_table([("soak", machine)]))


if __name__ == "__main__":
    main()
