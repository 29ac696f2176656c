"""Benchmark the refresh, GET /metrics and the fleet page with 10,000 models, 1% receiving data.

    python bench/bench_fleet.py [--models 10000] [--active 0.01] [--rounds 3] [--scrapes 50]

Registers ``--models`` contracts in a fresh PostgreSQL database (next to
``CALMON_BENCH_DATABASE_URL``): one fitted over HTTP, the others its copies written in bulk
into the tables (no audit events). Starts ``calmon serve`` with 2 workers and the refresher off,
stores the readings a first refresh cycle gives a model without data for every model (copies of
one model's, through the storage layer; ``--full-first-cycle`` times a real first cycle over
every model instead), streams predictions and labels over HTTP to ``--active`` of the models,
and runs a first refresh cycle.
Then each round streams a batch to another ``--active`` of the models and times one refresh
cycle (in this process, as ``calmon refresh`` runs it). Last it times ``--scrapes`` scrapes of
``/metrics`` and GETs of the first page of ``/ui`` over HTTP. Targets: a refresh cycle < 30 s,
``/metrics`` p95 < 1 s, ``/ui`` first page < 300 ms.

    python bench/bench_fleet.py --live [--models 10000] [--clients 4] [--refresh-seconds 30]

``--live`` instead registers the models over HTTP (``POST /v1/contracts``, copies of one fitted
contract) from ``--clients`` concurrent clients as fast as they go, while calmon refreshes in
the service (``CALMON_REFRESH_SECONDS`` = ``--refresh-seconds``): first the ``--active`` share
of them, to which one more client then streams ``--predictions`` predictions (80% labeled)
each once per refresh interval, then the others. A sampler reads every model's
``calmon_readings_age_seconds`` from ``/metrics`` every ``--sample-every`` seconds throughout
and for ``--settle`` seconds after the last registration. It reports the largest age seen
(target: at most 2 x ``CALMON_REFRESH_SECONDS`` + 30 s), the refresh cycles' durations (from
the service's log), how long after its registration each model's age series first appeared,
and the machine's load average meanwhile.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from sqlalchemy import insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import (
    PORT,
    ROOT,
    K,
    call,
    drop_database,
    fresh_database,
    iso,
    send_all,
    start_service,
    synthetic_fit_body,
)

from service.config import Settings, load_settings
from service.db.database import Database
from service.db.models import ContractRecord, ModelRecord
from service.export import change_store
from service.export.plan import ModelWork, inputs_key
from service.export.refresher import RefreshReport, refresh_all, refresh_model

TIERS = ("gold", "std")
REGIONS = ("emea", "apac", "amer")


def register_fleet(db: Database, template_id: str, models: int) -> float:
    """Register ``models - 1`` more models with the template's contract, written in bulk into
    ``models`` and ``contracts`` (no audit events); returns seconds taken."""
    start = time.perf_counter()
    with db.session() as session:
        template = session.execute(
            select(ContractRecord).where(ContractRecord.id == template_id)
        ).scalar_one()
        columns = {
            c.key: getattr(template, c.key)
            for c in ContractRecord.__table__.columns
            if c.key not in ("seq", "id", "model", "checkpoint")
        }
        now = datetime.now(UTC)
        for first in range(1, models, 1000):
            names = [f"model-{i:05d}" for i in range(first, min(first + 1000, models))]
            session.execute(
                insert(ModelRecord),
                [{"name": n, "latest_version": 1, "created_at": now} for n in names],
            )
            session.execute(
                insert(ContractRecord),
                [{**columns, "id": str(uuid.uuid4()), "model": n, "checkpoint": n} for n in names],
            )
        session.commit()
    return time.perf_counter() - start


SEED_READINGS = (
    'INSERT INTO stored_readings (model, cohort, "window", contract_id, contract_version,'
    ' computed_at, "values", stale_at) SELECT c.model, r.cohort, r."window", c.id, c.version,'
    ' r.computed_at, r."values", r.stale_at FROM contracts c CROSS JOIN stored_readings r'
    " WHERE r.model = :template AND c.model <> :template"
)
SEED_STATES = (
    "INSERT INTO refresh_states (model, inputs_key, exported, unexported, status, severity,"
    " fragment, rendered_at) SELECT c.model, replace(s.inputs_key, 'contracts=1:' || t.seq,"
    " 'contracts=1:' || c.seq), s.exported, s.unexported, s.status, s.severity,"
    " CAST(replace(CAST(s.fragment AS text), 'model=\\\"' || :template || '\\\"',"
    " 'model=\\\"' || c.model || '\\\"') AS json), s.rendered_at"
    " FROM contracts c, refresh_states s, contracts t"
    " WHERE s.model = :template AND t.model = :template AND c.model <> :template"
)


def seed_idle_states(db: Database, settings: Settings, template: str) -> float:
    """Store for every model but ``template`` what a first refresh cycle stores for a model
    without data: ``template``'s readings, refresh state and fragment (refreshed here), copied
    with the model's name and contract; returns seconds taken."""
    start = time.perf_counter()
    with db.read_session() as session:
        fleet_model = change_store.fleet_models(session)[template]
    now = datetime.now(UTC)
    work = ModelWork(template, inputs_key(fleet_model, settings), None)
    refresh_model(db, work, settings, now)
    with db.session() as session:
        session.execute(text(SEED_READINGS), {"template": template})
        session.execute(text(SEED_STATES), {"template": template})
        session.commit()
    return time.perf_counter() - start


def stream(conn: http.client.HTTPConnection, model: str, n: int, seed: int, cohorts: bool) -> None:
    """``n`` predictions of the last two hours to ``model``, 80% of them labeled; with
    ``cohorts``, each in a region (3) and a tier (2): slices all and 5 more, else all only."""
    rng = np.random.default_rng(seed)
    now = datetime.now(UTC)
    logits = np.round(rng.normal(size=(n, K)) * 2, 4)
    ids = [f"s{seed}-{i}" for i in range(n)]
    predictions = [
        {
            "id": ids[i],
            "ts": iso(now - timedelta(seconds=float(rng.uniform(60, 7200)))),
            "cohort": {"region": REGIONS[i % 3], "tier": TIERS[i % 2]} if cohorts else {},
            "logits": logits[i].tolist(),
        }
        for i in range(n)
    ]
    body = json.dumps({"model": model, "predictions": predictions}).encode()
    status, reply = call(conn, "POST", "/v1/predictions", body)
    assert status == 200, reply[:300]
    labels = [
        {"id": ids[i], "label": int(rng.integers(0, K)), "ts": iso(now)} for i in range(n * 4 // 5)
    ]
    body = json.dumps({"model": model, "labels": labels}).encode()
    status, reply = call(conn, "POST", "/v1/labels", body)
    assert status == 200, reply[:300]


def timed_gets(path: str, count: int) -> tuple[float, float, int]:
    """p50 and p95 (ms) of ``count`` GETs of ``path`` on one connection, and the body size."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    latencies, size = [], 0
    for _ in range(count):
        start = time.perf_counter()
        status, body = call(conn, "GET", path)
        latencies.append((time.perf_counter() - start) * 1000)
        assert status == 200, body[:300]
        size = len(body)
    p50, p95 = np.percentile(latencies, [50, 95])
    return float(p50), float(p95), size


#: Fields of a stored contract that the server sets, left out of a registration body.
SERVER_FIELDS = frozenset(
    {"id", "version", "created_at", "created_by", "content_sha256", "retired", "retirement"}
)
AGE = b"calmon_readings_age_seconds{"


@dataclass
class AgeSamples:
    """What the sampler saw of ``calmon_readings_age_seconds``: per scrape the time (epoch s)
    and the largest age, with its model; per model the time its series first appeared."""

    scrapes: list[tuple[float, float, str]] = field(default_factory=list)
    first_seen: dict[str, float] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def scrape(self, conn: http.client.HTTPConnection) -> None:
        status, body = call(conn, "GET", "/metrics")
        at = time.time()
        assert status == 200, body[:300]
        worst, worst_model = 0.0, ""
        with self.lock:
            for line in body.split(b"\n"):
                if not line.startswith(AGE):
                    continue
                labels, value = line.rsplit(b" ", 1)
                model = labels[len(AGE) :].split(b'"')[1].decode()
                age = float(value)
                self.first_seen.setdefault(model, at)
                if age > worst:
                    worst, worst_model = age, model
            self.scrapes.append((at, worst, worst_model))
            self.loads.append(os.getloadavg()[0])


def refresh_cycles(log: Path) -> list[dict[str, object]]:
    """The service's ``refreshed readings`` log lines, in order."""
    cycles = []
    for line in log.read_text(errors="replace").splitlines():
        if '"refreshed readings"' in line:
            cycles.append(json.loads(line))
    return cycles


def live(args: argparse.Namespace, base: str) -> list[tuple[str, str, str]]:
    """Register ``args.models`` models over HTTP while the service refreshes and a sampler reads
    every model's readings age; the report's rows."""
    name, url = fresh_database(base)
    log = Path(tempfile.mkdtemp(prefix="calmon-bench-fleet-")) / "calmon.log"
    service = start_service(
        url,
        2,
        4,
        settings={
            "CALMON_REFRESH_IN_SERVICE": "true",
            "CALMON_REFRESH_SECONDS": str(args.refresh_seconds),
            "CALMON_LOG_LEVEL": "INFO",
        },
        log=log,
    )
    rows: list[tuple[str, str, str]] = []
    names = [f"model-{i:05d}" for i in range(args.models)]
    active = set(names[:: max(round(1 / args.active), 1)])
    done = threading.Event()
    samples = AgeSamples()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        status, reply = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body(names[0]))
        assert status == 201, reply[:300]
        fitted = {k: v for k, v in json.loads(reply).items() if k not in SERVER_FIELDS}
        fitted.pop("warnings", None)
        bodies = {
            model: json.dumps({**fitted, "model": model, "checkpoint": model}).encode()
            for model in names[1:]
        }

        def sample() -> None:
            own = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
            while not done.is_set():
                samples.scrape(own)
                done.wait(args.sample_every)

        def feed() -> None:
            own = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
            seed = 0
            while not done.is_set():
                start = time.monotonic()
                for model in sorted(active):
                    seed += 1
                    stream(own, model, args.predictions, seed, args.cohorts)
                done.wait(max(args.refresh_seconds - (time.monotonic() - start), 0.0))

        helpers = [threading.Thread(target=sample), threading.Thread(target=feed)]
        helpers[0].start()
        start = time.time()
        # The models streamed to first, then the others, all of them as fast as the clients go.
        _, replies = send_all(
            [bodies[m] for m in sorted(active - {names[0]})], "/v1/contracts", args.clients, 201
        )
        helpers[1].start()
        _, more = send_all(
            [b for m, b in bodies.items() if m not in active], "/v1/contracts", args.clients, 201
        )
        registering = time.time() - start
        done.wait(args.settle)
        done.set()
        for t in helpers:
            t.join()
    finally:
        done.set()
        stop(service, base, name, args.keep)
    registered = {
        r["model"]: datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")).timestamp()
        for r in [json.loads(reply), *replies, *more]
    }
    durations = [float(str(c["seconds"])) for c in refresh_cycles(log)]
    target = 2 * args.refresh_seconds + 30
    ages = [worst for _, worst, _ in samples.scrapes]
    at, worst, worst_model = max(samples.scrapes, key=lambda s: s[1])
    rows.append(
        (
            f"register over HTTP, {args.clients} clients",
            f"{args.models:,} models ({len(active)} streamed to)",
            f"{registering:.0f} s, {(args.models - 1) / registering:.0f}/s",
        )
    )
    rows.append(
        (
            "refresh cycles (service log)",
            f"{len(durations)} cycles",
            f"max {max(durations):.1f} s, median {float(np.median(durations)):.1f} s; "
            + ", ".join(f"{d:.0f}" for d in durations)
            if durations
            else "none ended",
        )
    )
    rows.append(
        (
            "largest calmon_readings_age_seconds",
            f"{len(ages)} scrapes every {args.sample_every:g} s",
            f"{worst:.0f} s ({worst_model}, {at - start:.0f} s in; target <= {target:g} s)"
            if worst_model
            else "no model had an age series",
        )
    )
    delays = [samples.first_seen[m] - registered[m] for m in registered if m in samples.first_seen]
    missing = len(registered) - len(delays)
    p50, p95 = np.percentile(delays, [50, 95]) if delays else (float("nan"),) * 2
    rows.append(
        (
            "age series after registration",
            f"{len(delays):,} models ({missing} never)",
            f"p50 {p50:.0f} s, p95 {p95:.0f} s, max {max(delays, default=float('nan')):.0f} s",
        )
    )
    rows.append(
        (
            "load average (1 min) while sampling",
            f"{os.cpu_count()} cores",
            f"{min(samples.loads):.1f} to {max(samples.loads):.1f}, "
            f"median {float(np.median(samples.loads)):.1f}",
        )
    )
    print(f"service log: {log}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--active", type=float, default=0.01, help="share of models streamed to")
    parser.add_argument("--predictions", type=int, default=200, help="per active model a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cohorts",
        action="store_true",
        help="give predictions a region and a tier (6 slices a model instead of all alone)",
    )
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument(
        "--full-first-cycle",
        action="store_true",
        help="time a first refresh cycle over every model instead of storing the idle models'"
        " first readings as copies of one model's",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="register the models over HTTP while the service refreshes; sample their ages",
    )
    parser.add_argument("--clients", type=int, default=4, help="--live: registering clients")
    parser.add_argument("--refresh-seconds", type=float, default=30.0)
    parser.add_argument("--sample-every", type=float, default=2.0, help="--live: seconds")
    parser.add_argument(
        "--settle", type=float, default=150.0, help="--live: sampling after the last registration"
    )
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    if args.live:
        print_table(live(args, base))
        return
    name, url = fresh_database(base)
    os.environ["CALMON_REFRESH_IN_SERVICE"] = "false"
    service = start_service(url, 2, 4)
    db = Database(url)
    settings = load_settings({"database_url": url})
    rng = np.random.default_rng(0)
    rows: list[tuple[str, str, str]] = []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        status, reply = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body("model-00000"))
        assert status == 201, reply[:300]
        seconds = register_fleet(db, json.loads(reply)["id"], args.models)
        rows.append(
            ("register contracts (storage layer)", f"{args.models:,} models", f"{seconds:.1f} s")
        )
        active = max(int(args.models * args.active), 1)
        names = [f"model-{i:05d}" for i in range(args.models)]

        def stream_round(seed: int) -> float:
            start = time.perf_counter()
            for j, model in enumerate(rng.choice(names, active, replace=False)):
                stream(conn, str(model), args.predictions, seed * 100_000 + j, args.cohorts)
            return time.perf_counter() - start

        if not args.full_first_cycle:
            seconds = seed_idle_states(db, settings, "model-00000")
            rows.append(
                (
                    "store the idle models' first readings (copies)",
                    f"{args.models:,} models",
                    f"{seconds:.1f} s",
                )
            )
        seconds = stream_round(0)
        rows.append(
            (
                "stream to the active models",
                f"{active} models x {args.predictions}",
                f"{seconds:.1f} s",
            )
        )
        first = refresh_all(db, settings)
        rows.append(
            (
                "first refresh cycle (every model new)"
                if args.full_first_cycle
                else "first refresh cycle (the streamed models new)",
                describe(first),
                f"{first.seconds:.1f} s",
            )
        )
        again = refresh_all(db, settings)
        rows.append(("refresh cycle, nothing new", describe(again), f"{again.seconds:.2f} s"))
        cycles = []
        for r in range(1, args.rounds + 1):
            stream_round(r)
            report = refresh_all(db, settings)
            cycles.append(report.seconds)
            rows.append((f"refresh cycle, round {r}", describe(report), f"{report.seconds:.2f} s"))
        p50, p95, size = timed_gets("/metrics", args.scrapes)
        rows.append(
            (
                "GET /metrics",
                f"{size / 1e6:.1f} MB, {args.scrapes} scrapes",
                f"p50 {p50:.0f} ms, p95 {p95:.0f} ms",
            )
        )
        p50, p95, size = timed_gets("/ui", args.scrapes)
        rows.append(
            (
                "GET /ui (first page)",
                f"{size / 1e3:.0f} kB, {args.scrapes} GETs",
                f"p50 {p50:.0f} ms, p95 {p95:.0f} ms",
            )
        )
    finally:
        db.dispose()
        stop(service, base, name, args.keep)
    print_table(rows)
    print(f"\nsteady refresh cycles: max {max(cycles):.2f} s (target < 30 s)")


def stop(service: subprocess.Popen[bytes], base: str, name: str, keep: bool) -> None:
    """Stop calmon and drop its database unless ``keep``."""
    service.terminate()
    service.wait(timeout=60)
    if not keep:
        drop_database(base, name)


def print_table(rows: list[tuple[str, str, str]]) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {datetime.now(UTC):%Y-%m-%d}; commit {commit}\n"
    )
    print("| what | size | measured |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def describe(report: RefreshReport) -> str:
    return f"{report.changed:,} of {report.models:,} models changed, {report.readings:,} readings"


if __name__ == "__main__":
    main()
