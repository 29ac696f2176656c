"""Benchmark GET /metrics with 500 cohort slices x 3 windows of stored readings.

    python bench/bench_metrics.py [--slices 500] [--scrapes 200]

Fills ``stored_readings`` of a fresh PostgreSQL database (next to ``CALMON_BENCH_DATABASE_URL``)
for one model, starts ``calmon serve`` with 2 workers and the refresher off, and times scrapes
over HTTP. Target: p95 <= 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import PORT, drop_database, fresh_database, start_service

from service.calibration.vocabulary import Status
from service.config import Settings
from service.db.database import Database
from service.export.collector import render_readings
from service.export.reading_store import ReadingRow, replace_model_readings, store_exposition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slices", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name, url = fresh_database(base)
    os.environ["CALMON_REFRESH_IN_SERVICE"] = "false"
    service = start_service(url, 2, Settings.threads)  # calmon serve's default threads per worker
    try:
        rng = np.random.default_rng(0)
        now = datetime.now(UTC)
        rows = []
        for s in range(args.slices):
            cohort = "all" if s == 0 else f"key{s % 8}=value{s}"
            for window in ("1h", "24h", "7d"):
                ece = float(rng.uniform(0, 0.2))
                values = {
                    "ece": ece,
                    "ece_ci_lower": ece * 0.8,
                    "ece_ci_upper": ece * 1.2,
                    "nll": float(rng.uniform(0.3, 1)),
                    "brier": float(rng.uniform(0, 1)),
                    "accuracy": float(rng.uniform(0.5, 1)),
                    "mean_confidence": float(rng.uniform(0.5, 1)),
                    "predictions": int(rng.integers(1000, 10**6)),
                    "labeled_predictions": int(rng.integers(100, 1000)),
                    "label_coverage": float(rng.uniform(0, 1)),
                    "ece_delta": float(rng.normal(0, 0.02)),
                    "refit_temperature": float(rng.uniform(0.8, 1.5)),
                    "confidence_psi": float(rng.uniform(0, 0.3)),
                    "expected_accuracy": float(rng.uniform(0.5, 1)),
                    "drift_status": Status.OK.gauge_value,
                    "status": "ok",
                    "reasons": [],
                    "policy_max_ece": 0.05,
                }
                rows.append(ReadingRow("bench", cohort, window, "c" * 36, 1, now, values))
        db = Database(url)
        with db.session() as session:
            replace_model_readings(session, "bench", rows)
            store_exposition(session, render_readings(rows), now)
            session.commit()
        db.dispose()
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
        latencies, size = [], 0
        for _ in range(args.scrapes):
            start = time.perf_counter()
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            body = response.read()
            latencies.append((time.perf_counter() - start) * 1000)
            assert response.status == 200
            size = len(body)
        p50, p95 = np.percentile(latencies, [50, 95])
        series = body.count(b"\ncalmon_ece{")
    finally:
        service.terminate()
        service.wait(timeout=60)
        drop_database(base, name)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}\n"
    )
    print("| what | measured | target |")
    print("|---|---|---|")
    print(
        f"| GET /metrics, {args.slices} slices x 3 windows ({len(rows)} readings, "
        f"{series} calmon_ece series, {size / 1e6:.1f} MB) | p50 {p50:.1f} ms, "
        f"p95 {p95:.1f} ms | p95 <= 100 ms |"
    )


if __name__ == "__main__":
    main()
