"""The real server: gunicorn with two workers, and a real Prometheus scraping it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.db.migrate import upgrade_to_head
from tests.integration.conftest import ADMIN_TOKEN, fresh_database
from tests.integration.factories import fit_body
from tests.integration.test_stream import minutes_ago

pytestmark = pytest.mark.slow

CALMON = Path(sys.executable).parent / "calmon"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]
    metrics_dir: Path

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = ADMIN_TOKEN
    ) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def cli(
        self, command: str, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``calmon COMMAND --url URL --token ADMIN ARGS`` against this server (no PATH, no
        CALMON_* variables), asserted to exit 0."""
        result = subprocess.run(
            [str(CALMON), command, "--url", self.url, "--token", ADMIN_TOKEN, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": ""},
        )
        assert result.returncode == 0, result.stderr
        return result


STARTUP_SECONDS = 120.0
"""How long a test waits for a served process to come up: a bound on a failure, generous enough
for a loaded two-core machine, never the expected start-up time."""


def wait_until(check, seconds: float, what: str) -> Any:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {seconds} s waiting for {what}")


@contextmanager
def serving(url: str, tmp_path: Path, **settings: str) -> Iterator[Served]:
    """``calmon serve --workers 2`` against ``url`` (already migrated), stopped afterwards;
    ``settings`` are further environment variables (``CALMON_MAX_BODY_BYTES="1000"``)."""
    port = free_port()
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_ADMIN_TOKEN": ADMIN_TOKEN,
        "CALMON_REFRESH_SECONDS": "1",
        "CALMON_REFRESH_IN_SERVICE": "true",
        "CALMON_LOG_LEVEL": "WARNING",
        **settings,
    }
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    log = (tmp_path / "calmon.log").open("wb")
    process = subprocess.Popen(
        [str(CALMON), "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Served(f"http://127.0.0.1:{port}", process, tmp_path / "metrics")
    try:
        wait_until(
            lambda: server.call("GET", "/healthz")[0] == 200, STARTUP_SECONDS, "calmon to start"
        )
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@contextmanager
def serving_fresh(tmp_path: Path, **settings: str) -> Iterator[Served]:
    """``calmon serve --workers 2`` on a fresh, migrated database of the backend under test."""
    with fresh_database(tmp_path, "served.db") as url:
        upgrade_to_head(url)
        with serving(url, tmp_path, **settings) as server:
            yield server


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving_fresh(tmp_path) as server:
        yield server


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def stream_some(server: Served, model: str, n: int, batches: int) -> None:
    status, _ = server.call("POST", "/v1/contracts/fit", fit_body(model))
    assert status == 201

    def send(b: int) -> int:
        preds = [
            {
                "id": f"{b}-{i}",
                "ts": minutes_ago(3),
                "cohort": {"region": ["emea", "apac"][i % 2]},
                "logits": [float(i % 3), 1.0, 0.5],
            }
            for i in range(n)
        ]
        status, reply = server.call(
            "POST", "/v1/predictions", {"model": model, "predictions": preds}
        )
        assert status == 200, reply
        labels = [{"id": f"{b}-{i}", "label": i % 2, "ts": minutes_ago(0)} for i in range(n)]
        status, reply = server.call("POST", "/v1/labels", {"model": model, "labels": labels})
        assert status == 200, reply
        return int(reply["joined"])

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert sum(pool.map(send, range(batches))) == n * batches


def workers_that_answered(server: Served) -> int:
    """Send a few concurrent requests; how many worker processes have answered one so far
    (each keeps its own request-duration file in the multiprocess directory)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: server.call("GET", "/healthz"), range(8)))
    return len(list(server.metrics_dir.glob("histogram_*.db")))


def test_counters_add_up_across_two_workers(served: Served) -> None:
    # The server answers once one worker is up; the other may still be booting.
    wait_until(
        lambda: workers_that_answered(served) >= 2, STARTUP_SECONDS, "both workers to answer"
    )
    stream_some(served, "busy", n=20, batches=24)
    for _ in range(12):
        status, text = served.call("GET", "/metrics", token=None)
        assert status == 200
        samples = metric_samples(text)
        assert samples[("calmon_predictions_ingested_total", (("model", "busy"),))] == 480
        assert (
            samples[("calmon_labels_ingested_total", (("model", "busy"), ("outcome", "joined")))]
            == 480
        )
    writers = list(served.metrics_dir.glob("counter_*.db"))
    assert len(writers) >= 2, f"only {len(writers)} worker(s) counted: {writers}"


def test_prometheus_scrapes_the_same_ece_as_the_api(served: Served, tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is not installed: .ci/run installs Debian's prometheus package"
    stream_some(served, "scraped", n=25, batches=8)
    status, api = served.call("GET", "/v1/models/scraped/calibration?window=24h&cohort=region:emea")
    assert status == 200 and api["n_labeled"] == 8 * 13
    port = free_port()
    target = urllib.parse.urlparse(served.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: calmon\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        query = urllib.parse.urlencode(
            {"query": 'calmon_ece{model="scraped",cohort="region=emea",window="24h"}'}
        )

        def scraped() -> list[Any]:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5
            ) as response:
                return json.loads(response.read())["data"]["result"]

        result = wait_until(scraped, 60, "Prometheus to scrape calmon_ece")
        assert len(result) == 1
        assert result[0]["metric"]["contract_version"] == "1"
        assert float(result[0]["value"][1]) == api["metrics"]["ece"]
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
