"""Faults: a killed worker, a cut-off request, a database outage, concurrent writers."""

from __future__ import annotations

import glob
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.export.refresher import refresh_all
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body
from tests.integration.test_served import (  # noqa: F401
    STARTUP_SECONDS,
    Served,
    free_port,
    served,
    serving,
    wait_until,
)
from tests.integration.test_stream import (
    _comparable,
    _multiclass_contract,
    _random_predictions,
    minutes_ago,
    reading,
)


def batch(prefix: str, n: int) -> dict[str, Any]:
    ts = minutes_ago(2)
    return {
        "model": "faulty",
        "predictions": [
            {
                "id": f"{prefix}-{i}",
                "ts": ts,
                "cohort": {"region": "emea"},
                "logits": [float(i % 3), 0.5, 0.25],
            }
            for i in range(n)
        ],
    }


def worker_pids(master: int) -> list[int]:
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            pids.append(int(stat.split("/")[2]))
    return pids


@pytest.mark.slow
def test_a_killed_worker_loses_no_acknowledged_prediction(served: Served) -> None:  # noqa: F811
    assert served.call("POST", "/v1/contracts/fit", fit_body("faulty"))[0] == 201
    acknowledged: list[dict[str, Any]] = []
    failures: list[str] = []
    stop = threading.Event()

    def sender(name: str) -> None:
        n = 0
        while not stop.is_set():
            body = batch(f"{name}{n}", 300)
            n += 1
            try:
                status, reply = served.call("POST", "/v1/predictions", body)
            except (OSError, http.client.HTTPException) as exc:
                # The killed worker may have sent its headers but not its body: not acknowledged.
                failures.append(repr(exc))
                continue
            if status == 200:
                acknowledged.append(body)
            else:
                failures.append(f"{status} {reply}")

    threads = [threading.Thread(target=sender, args=(f"s{k}",)) for k in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acknowledged) >= 5, 30, "some acknowledged batches")
    victims = worker_pids(served.process.pid)
    assert len(victims) == 2
    os.kill(victims[0], signal.SIGKILL)
    wait_until(
        lambda: len(set(worker_pids(served.process.pid)) - {victims[0]}) == 2,
        30,
        "gunicorn to replace the killed worker",
    )
    before = len(acknowledged)
    wait_until(lambda: len(acknowledged) >= before + 5, 30, "acknowledgements after the kill")
    stop.set()
    for t in threads:
        t.join()
    assert served.call("GET", "/healthz")[0] == 200
    for body in acknowledged:
        status, reply = served.call("POST", "/v1/predictions", body)
        assert status == 200 and reply["accepted"] == 0 and reply["duplicates"] == 300, reply
    status, got = served.call("GET", "/v1/models/faulty/calibration?window=1h")
    assert status == 200 and got["n_predictions"] >= 300 * len(acknowledged)


@pytest.mark.slow
def test_a_request_cut_off_mid_body_writes_nothing(served: Served) -> None:  # noqa: F811
    assert served.call("POST", "/v1/contracts/fit", fit_body("faulty"))[0] == 201
    body = json.dumps(batch("cut", 500)).encode()
    host, port = served.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/predictions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
    time.sleep(1)
    status, got = served.call("GET", "/v1/models/faulty/calibration?window=1h")
    assert status == 200 and got["n_predictions"] == 0
    status, reply = served.call("POST", "/v1/predictions", json.loads(body))
    assert status == 200 and reply["accepted"] == 500


@pytest.fixture
def private_postgres() -> Iterator[tuple[str, Any]]:
    """A PostgreSQL cluster of the test's own (stoppable without touching the shared one).

    It lives in a directory the ``postgres`` user can reach (pytest's are private to root).
    """
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    assert binaries, "PostgreSQL server binaries are missing (Debian's postgresql package)"
    bin_dir = Path(binaries[-1])
    home = Path(tempfile.mkdtemp(prefix="calmon-pg-"))
    home.chmod(0o755)
    data, sockets = home / "pgdata", home / "sock"
    data.mkdir()
    sockets.mkdir()
    subprocess.run(["chown", "-R", "postgres", str(home)], check=True)
    as_postgres = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"

    def pg_ctl(*args: str) -> None:
        command = [
            *as_postgres,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(home / "pg.log"),
            *args,
        ]
        subprocess.run(command, check=True, capture_output=True)

    def start() -> None:
        pg_ctl("-o", options, "start")

    def stop() -> None:
        pg_ctl("-m", "fast", "stop")

    start()
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", (start, stop)
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_database_outage_is_a_503_and_the_service_recovers(
    private_postgres, tmp_path: Path
) -> None:
    url, (start, stop) = private_postgres
    upgrade_to_head(url)
    with serving(url, tmp_path) as server:
        assert server.call("POST", "/v1/contracts/fit", fit_body("faulty"))[0] == 201
        assert server.call("POST", "/v1/predictions", batch("up", 10))[0] == 200
        stop()
        request = urllib.request.Request(
            server.url + "/v1/predictions",
            method="POST",
            data=json.dumps(batch("down", 10)).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 503
        assert refused.value.headers["Retry-After"]
        assert json.loads(refused.value.read())["error"]["code"] == "database_unavailable"
        assert server.call("GET", "/readyz")[0] == 503
        assert server.call("GET", "/healthz")[0] == 200
        metrics = server.call("GET", "/metrics", token=None)
        assert metrics[0] == 200 and "calmon_exporter_up 0.0" in metrics[1]
        start()
        wait_until(
            lambda: server.call("GET", "/readyz")[0] == 200, STARTUP_SECONDS, "readiness to return"
        )
        status, reply = server.call("POST", "/v1/predictions", batch("down", 10))
        assert status == 200 and reply["accepted"] == 10


def test_concurrent_writers_end_like_a_serial_run(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    _multiclass_contract(client, auth, "serial")
    _multiclass_contract(client, auth, "parallel")
    rows = _random_predictions(600, seed=21)
    for model in ("serial",):
        for start in range(0, 600, 150):
            part = rows[start : start + 150]
            client.post(
                "/v1/predictions",
                json={
                    "model": model,
                    "predictions": [
                        {k: r[k] for k in ("id", "ts", "cohort", "logits")} for r in part
                    ],
                },
                headers=auth.headers("ingest"),
            )
        client.post(
            "/v1/labels",
            json={
                "model": model,
                "labels": [
                    {"id": r["id"], "label": r["label"], "ts": minutes_ago(0)} for r in rows
                ],
            },
            headers=auth.headers("ingest"),
        )
    rng = random.Random(5)
    jobs: list[tuple[str, list[dict[str, Any]]]] = []
    for _ in range(3):
        for start in range(0, 600, 100):
            chunk = rows[start : start + 100]
            jobs.append(
                (
                    "/v1/predictions",
                    [{k: r[k] for k in ("id", "ts", "cohort", "logits")} for r in chunk],
                )
            )
            jobs.append(
                (
                    "/v1/labels",
                    [{"id": r["id"], "label": r["label"], "ts": minutes_ago(0)} for r in chunk],
                )
            )
    rng.shuffle(jobs)
    replies: list[tuple[str, int, dict[str, Any]]] = []
    lock = threading.Lock()

    def work(part: list[tuple[str, list[dict[str, Any]]]]) -> None:
        local = app.test_client()
        for route, items in part:
            key = "predictions" if route == "/v1/predictions" else "labels"
            response = local.post(
                route, json={"model": "parallel", key: items}, headers=auth.headers("ingest")
            )
            with lock:
                replies.append((route, response.status_code, response.get_json()))

    threads = [threading.Thread(target=work, args=(jobs[k::6],)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {status for _, status, _ in replies} == {200}, [r for r in replies if r[1] != 200][:3]
    predictions = [r for route, _, r in replies if route == "/v1/predictions"]
    assert sum(r["accepted"] for r in predictions) == 600
    assert sum(r["duplicates"] for r in predictions) == 1200
    labels = [r for route, _, r in replies if route == "/v1/labels"]
    assert sum(r["joined"] + r["pending"] for r in labels) == 600
    assert sum(r["duplicates"] for r in labels) == 1200
    assert all(not r["conflicts"] for r in labels)
    refresh_all(db, app.config["CALMON_SETTINGS"])
    serial, parallel = reading(client, auth, "serial"), reading(client, auth, "parallel")
    assert parallel["n_predictions"] == parallel["n_labeled"] == 600
    a, b = _comparable(serial), _comparable(parallel)
    assert (a["n_predictions"], a["n_labeled"]) == (b["n_predictions"], b["n_labeled"])
    assert [x["n"] for x in a["bins"]] == [x["n"] for x in b["bins"]]
    for x, y in zip(a["bins"], b["bins"], strict=True):
        assert y["mean_confidence"] == pytest.approx(x["mean_confidence"], rel=1e-12)
        assert y["accuracy"] == x["accuracy"]
    for key in ("ece", "nll", "brier", "accuracy"):
        assert b["metrics"][key] == pytest.approx(a["metrics"][key], rel=1e-9)
