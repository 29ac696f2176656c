"""Benchmark what a contract with many classes costs per bucket row: bytes stored, database
size and CPU per one-item request.

    python bench/bench_large_k.py [--classes 1000] [--edges 101] [--body-bytes 1000000]
                                  [--database-url URL]
    python bench/bench_large_k.py --table [--database-url URL]

Runs calmon in this process (the Flask app through its test client) on a fresh database: a
SQLite file in a temporary directory, or ``--database-url``, which must name an empty
database (it is migrated). A contract with ``--classes`` classes and ``--edges`` equal-width
bin edges is fitted through ``POST /v1/contracts/fit``; then one-item requests are sent, a
prediction (its own 5-minute bucket, one of three regions) and right after it its label, until
the prediction bodies sum to ``--body-bytes``. Prints the bucket rows, the bytes a bucket row
stores (``stats`` and ``confidence_counts`` blobs), the size of the database and of its
bucket table, and the CPU time (``time.process_time``: parsing, statistics and, on SQLite,
the database work all run in this process) per one-item request, median and worst.

``--table`` measures the bytes stored per bucket row for K = 2, 10, 100, 1000 and M = 15, 100
bins, from rows written through the same requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text

from service import create_app
from service.db.migrate import upgrade_to_head

TOKEN = "calmon_bench-large-k-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
REGIONS = ("emea", "apac", "amer")
START = datetime(2026, 11, 2, tzinfo=UTC)


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def fit_body(model: str, classes: int, edges: int, rows: int = 300) -> dict[str, Any]:
    """A ``POST /v1/contracts/fit`` body on random logits with ``classes`` classes."""
    rng = np.random.default_rng(7)
    sets = {
        name: {
            "logits": np.round(rng.normal(size=(rows, classes)) * 2, 6).tolist(),
            "labels": rng.integers(0, classes, rows).tolist(),
        }
        for name in ("fit", "eval")
    }
    return {
        "model": model,
        "checkpoint": model,
        "task": "multiclass",
        "classes": [f"c{k}" for k in range(classes)],
        "population": "synthetic",
        "outcome": "top-label correct",
        "split": {"method": "random"},
        "data_window": {"start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"},
        "bin_edges": np.linspace(0.0, 1.0, edges).tolist(),
        "method": "temperature",
        **sets,
    }


@contextmanager
def service(url: str | None) -> Iterator[tuple[FlaskClient, str]]:
    """A migrated database (a temporary SQLite file without ``url``) and a client of calmon."""
    with tempfile.TemporaryDirectory() as tmp:
        url = url or f"sqlite:///{Path(tmp) / 'calmon.db'}"
        upgrade_to_head(url)
        app = create_app({"database_url": url, "admin_token": TOKEN})
        logging.getLogger("service.requests").setLevel(logging.WARNING)
        try:
            yield app.test_client(), url
        finally:
            app.extensions["calmon.database"].dispose()


def post(client: FlaskClient, path: str, body: bytes) -> tuple[float, float]:
    """Send one request; return its CPU and wall seconds. Any reply but 200/201 stops the
    benchmark."""
    began, wall = time.process_time(), time.perf_counter()
    reply = client.post(path, data=body, headers=HEADERS, content_type="application/json")
    spent = (time.process_time() - began, time.perf_counter() - wall)
    if reply.status_code not in (200, 201):
        raise SystemExit(f"{path}: {reply.status_code} {reply.get_data(as_text=True)[:500]}")
    return spent


def stream(
    client: FlaskClient, model: str, classes: int, body_bytes: int, seed: int = 1
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], int]:
    """One-item prediction requests, each followed by its label, until the prediction bodies
    sum to ``body_bytes``; returns the CPU and wall seconds of each prediction and label
    request and the bytes of prediction bodies sent."""
    rng = np.random.default_rng(seed)
    predictions: list[tuple[float, float]] = []
    labels: list[tuple[float, float]] = []
    sent = i = 0
    while sent < body_bytes:
        ts = START + timedelta(minutes=5 * i)
        item = {
            "id": f"p{i}",
            "ts": iso(ts),
            "cohort": {"region": REGIONS[i % len(REGIONS)]},
            "logits": np.round(rng.normal(size=classes) * 2, 6).tolist(),
        }
        body = json.dumps({"model": model, "predictions": [item]}).encode()
        predictions.append(post(client, "/v1/predictions", body))
        label = {"id": f"p{i}", "label": int(rng.integers(0, classes)), "ts": iso(ts)}
        labels.append(
            post(client, "/v1/labels", json.dumps({"model": model, "labels": [label]}).encode())
        )
        sent += len(body)
        i += 1
    return predictions, labels, sent


def bucket_bytes(url: str, model: str) -> tuple[int, float, int]:
    """Bucket rows of ``model``, the mean and the largest bytes of their two blobs."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows, mean, largest = connection.execute(
                text(
                    "SELECT count(*), avg(length(stats) + length(confidence_counts)),"
                    " max(length(stats) + length(confidence_counts))"
                    " FROM calibration_buckets WHERE model = :model"
                ),
                {"model": model},
            ).one()
    finally:
        engine.dispose()
    return int(rows), float(mean or 0.0), int(largest or 0)


def database_size(url: str) -> tuple[int, int]:
    """Bytes of the whole database and of ``calibration_buckets`` (with indexes and TOAST on
    PostgreSQL; its pages in the file on SQLite)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                whole = connection.scalar(text("SELECT pg_database_size(current_database())"))
                table = connection.scalar(
                    text("SELECT pg_total_relation_size('calibration_buckets')")
                )
            else:
                path = Path(url.removeprefix("sqlite:///"))
                whole = path.stat().st_size + sum(
                    p.stat().st_size for p in path.parent.glob(path.name + "-*")
                )
                table = connection.scalar(
                    text(
                        "SELECT sum(pgsize) FROM dbstat WHERE name IN"
                        " ('calibration_buckets', 'sqlite_autoindex_calibration_buckets_1')"
                    )
                )
    finally:
        engine.dispose()
    return int(whole or 0), int(table or 0)


def run_once(args: argparse.Namespace) -> None:
    with service(args.database_url) as (client, url):
        model = "bench-large-k"
        fit = json.dumps(fit_body(model, args.classes, args.edges)).encode()
        post(client, "/v1/contracts/fit", fit)
        predictions, labels, sent = stream(client, model, args.classes, args.body_bytes)
        rows, mean, largest = bucket_bytes(url, model)
        whole, table = database_size(url)
        began = time.process_time()
        reading = client.get(
            f"/v1/models/{model}/calibration?start={iso(START)}"
            f"&end={iso(START + timedelta(days=30))}",
            headers=HEADERS,
        )
        read_cpu = time.process_time() - began
        found = reading.get_json()
    backend = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    print(f"K = {args.classes}, {args.edges} edges, {backend}")
    print("| figure | value |")
    print("|---|---|")
    print(f"| one-item prediction requests | {len(predictions):,} ({sent:,} body bytes) |")
    print(f"| bucket rows | {rows:,} |")
    print(f"| bytes per bucket row, mean / largest | {mean:,.0f} / {largest:,} |")
    print(f"| database size | {whole / 1e6:,.1f} MB |")
    print(f"| calibration_buckets | {table / 1e6:,.1f} MB |")
    for name, spent in (("prediction", predictions), ("label", labels)):
        cpu = [c for c, _ in spent]
        wall = statistics.median(w for _, w in spent) * 1e3
        median, worst = statistics.median(cpu) * 1e3, max(cpu) * 1e3
        figure = f"CPU per one-item {name} request, median / worst (wall, median)"
        print(f"| {figure} | {median:,.1f} / {worst:,.1f} ms ({wall:,.1f} ms) |")
    print(f"| CPU of the 30-day calibration reading | {read_cpu * 1e3:,.1f} ms |")
    print(f"| classwise_ece | {found['metrics'].get('classwise_ece')} |")
    for note in found.get("notes", []):
        print(f"| note | {note} |")


def run_table(args: argparse.Namespace) -> None:
    sizes: dict[tuple[int, int], int] = {}
    with service(args.database_url) as (client, url):
        for classes in (2, 10, 100, 1000):
            for edges in (16, 101):
                model = f"bench-k{classes}-m{edges - 1}"
                fit = json.dumps(fit_body(model, classes, edges, 60)).encode()
                post(client, "/v1/contracts/fit", fit)
                stream(client, model, classes, 1, seed=classes + edges)
                sizes[classes, edges - 1] = bucket_bytes(url, model)[2]
    print("| K | M = 15 | M = 100 |")
    print("|---|---|---|")
    for classes in (2, 10, 100, 1000):
        cells = " | ".join(f"{sizes[classes, m]:,} B" for m in (15, 100))
        print(f"| {classes} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--edges", type=int, default=101)
    parser.add_argument("--body-bytes", type=int, default=1_000_000)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--table", action="store_true", help="bytes per bucket row by K and M")
    args = parser.parse_args()
    if args.table:
        run_table(args)
    else:
        run_once(args)


if __name__ == "__main__":
    main()
