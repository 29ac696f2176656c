"""The Python client against a real ``calmon serve``: logging in the background as Arrow, the
synchronous calls' typed results, the full-queue policies, a service killed and restarted
under a logging client losing nothing, and a script ending without ``close()`` having its rows
flushed or their loss reported (both backends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from service.client import Calmon, GateDecision, RequestFailed, Unreachable
from service.db.migrate import upgrade_to_head
from tests.integration.conftest import ADMIN_TOKEN, fresh_database, front_of_the_database
from tests.integration.factories import fit_body
from tests.integration.test_served import (
    CALMON,
    STARTUP_SECONDS,
    free_port,
    serving_fresh,
    wait_until,
)

#: A script that logs 3,000 predictions and ends without ``close()``. It imports no pandas
#: itself; pyarrow imports it (installed with the tests) on its first conversion.
EXITING_SCRIPT = """
import sys
from datetime import UTC, datetime, timedelta

import numpy as np

from service.client import Calmon

url, token, close_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
calmon = Calmon(url, token, model="glyphs", max_delay=60, close_timeout=close_timeout)
logits = np.random.default_rng(4).normal(size=(3_000, 3))
ts = datetime.now(UTC) - timedelta(minutes=5)
for part in range(3):
    ids = [f"exit-{part}-{i}" for i in range(1_000)]
    calmon.log_predictions(ids, logits[part * 1_000 : (part + 1) * 1_000], ts)
"""


def _logits(n: int, seed: int) -> np.ndarray:
    return np.round(np.random.default_rng(seed).normal(size=(n, 3)) * 2, 6)


class _ClosedColumn:
    """A lazily read column whose source was closed after the logging call returned."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: object) -> str:
        raise OSError("column source closed")


@pytest.mark.slow
def test_logging_and_the_synchronous_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving_fresh(tmp_path) as server:
        calmon = Calmon(server.url, ADMIN_TOKEN, model="glyphs", batch_size=300, max_delay=0.2)
        contract = calmon.fit(fit_body("glyphs"))
        assert (
            contract.model == "glyphs" and contract.version == 1 and contract.task == "multiclass"
        )
        now = datetime.now(UTC)
        n = 1_000
        frame = pd.DataFrame(
            {
                "id": [f"c{i}" for i in range(n)],
                "ts": pd.Series([now - timedelta(minutes=5 + i % 300) for i in range(n)]),
                "lang": ["tr" if i % 2 else "hu" for i in range(n)],
            }
        )
        logits = _logits(n, 1)
        queued = calmon.log_predictions(
            frame["id"][:600], logits[:600], frame["ts"][:600], {"lang": frame["lang"][:600]}
        )
        assert queued == 600
        calmon.log_predictions(
            frame["id"][600:].to_numpy(), logits[600:], frame["ts"][600:], {"lang": "tr"}
        )
        labels = np.random.default_rng(2).integers(0, 3, n)
        calmon.log_labels(list(frame["id"]), [["a", "b", "c"][k] for k in labels])
        assert calmon.flush(timeout=60)
        stats = calmon.stats
        assert (stats.sent, stats.dropped, stats.rejected) == (2 * n, 0, 0), stats
        assert stats.accepted == n and stats.joined == n
        reading = calmon.calibration(window="24h")
        assert reading.n_predictions == n and reading.n_labeled == n
        assert reading.ece is not None and 0 <= reading.ece <= 1
        tr = calmon.calibration(window="24h", cohort="lang=tr")
        assert tr.n_predictions == 300 + 400
        history = calmon.history(step="1h")
        assert sum(p.n_predictions for p in history.points) == n
        decision = calmon.gate(contract.id)
        assert isinstance(decision, GateDecision) and decision.decision in ("pass", "fail")
        assert decision.passed == (decision.decision == "pass") and decision.checks
        with pytest.raises(RequestFailed) as refused:
            calmon.calibration("nobody")
        assert refused.value.status == 404
        # Rows the service refuses are counted, not retried.
        calmon.log_labels(["c1"], ["no such class"])
        assert calmon.flush(timeout=30)
        assert calmon.stats.rejected == 1 and "label" in (calmon.stats.last_error or "")
        # An error while the thread reads a call drops that batch, counted and reported; the
        # thread goes on with the next one.
        capsys.readouterr()
        assert calmon.log_predictions(_ClosedColumn(3), _logits(3, 4)) == 3
        assert calmon.flush(timeout=30)
        assert calmon.stats.dropped == 3 and "OSError" in (calmon.stats.last_error or "")
        err = capsys.readouterr().err
        assert "3 rows for model 'glyphs' dropped: sending them failed (OSError" in err, err
        calmon.log_predictions(["after"], _logits(1, 5))
        assert calmon.flush(timeout=30)
        assert calmon.stats.sent == 2 * n + 1
        assert calmon.close()


def test_a_full_queue_drops_and_counts_or_blocks() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    dropping = Calmon(url, "t", model="m", max_queue=100, when_full="drop", backoff=0.05)
    assert dropping.log_predictions([f"x{i}" for i in range(80)], np.zeros(80)) == 80
    assert dropping.log_predictions([f"y{i}" for i in range(40)], np.zeros(40)) == 0
    assert not dropping.close(timeout=1)
    stats = dropping.stats
    assert stats.sent == 0 and stats.retried >= 80 and stats.dropped == 40 + 80

    blocking = Calmon(url, "t", model="m", max_queue=100, when_full="block", backoff=0.05)
    blocking.log_predictions([f"x{i}" for i in range(100)], np.zeros(100))
    started = time.monotonic()
    # The queue is full: the call blocks until close() gives up on the queued rows.
    closer = threading.Timer(1.0, lambda: blocking.close(timeout=0.5))
    closer.start()
    assert blocking.log_predictions(["late"], np.zeros(1)) == 0
    assert time.monotonic() - started >= 0.9
    closer.join()
    assert blocking.stats.dropped == 101
    with pytest.raises(ValueError, match="logits_or_scores"):
        blocking.log_predictions(["a", "b"], np.zeros(3))


def _run_exiting_script(
    tmp_path: Path, url: str, close_timeout: float
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "exiting.py"
    script.write_text(EXITING_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), url, ADMIN_TOKEN, str(close_timeout)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_rows_logged_before_exit_are_flushed_at_exit(tmp_path: Path) -> None:
    with serving_fresh(tmp_path) as server, Calmon(server.url, ADMIN_TOKEN) as probe:
        probe.fit(fit_body("glyphs"))
        ended = _run_exiting_script(tmp_path, server.url, close_timeout=60)
        assert ended.returncode == 0 and ended.stderr == "", ended.stderr
        assert probe.calibration("glyphs", window="24h").n_predictions == 3_000


@pytest.mark.slow
def test_rows_an_unreachable_service_never_got_are_reported_at_exit(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    ended = _run_exiting_script(tmp_path, url, close_timeout=1)
    assert time.monotonic() - started < 30
    assert ended.returncode == 0
    reported = "calmon client: at exit, 3000 of 3000 rows logged for model 'glyphs' were not stored"
    assert reported in ended.stderr, ended.stderr
    assert "3000 dropped" in ended.stderr and "unreachable" in ended.stderr


@contextmanager
def _server(url: str, port: int, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_ADMIN_TOKEN": ADMIN_TOKEN,
        "CALMON_LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / f"metrics-{time.monotonic_ns()}"),
    }
    process = subprocess.Popen(
        [str(CALMON), "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@front_of_the_database
@pytest.mark.slow
def test_a_service_down_for_30_seconds_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with fresh_database(tmp_path, "restart.db") as url:
        upgrade_to_head(url)
        probe = Calmon(base, ADMIN_TOKEN)
        with _server(url, port, tmp_path) as first:
            wait_until(lambda: _up(probe), STARTUP_SECONDS, "calmon to start")
            probe.fit(fit_body("glyphs"))
            calmon = Calmon(
                base, ADMIN_TOKEN, model="glyphs", batch_size=200, max_delay=0.1, max_backoff=2
            )
            now = datetime.now(UTC)
            logits = _logits(3_000, 3)

            def log(part: int) -> None:
                ids = [f"r{part}-{i}" for i in range(100)]
                calmon.log_predictions(ids, logits[part * 100 : part * 100 + 100], now)
                calmon.log_labels(ids, [i % 3 for i in range(100)], now)

            for part in range(10):
                log(part)
            assert calmon.flush(timeout=60)
            assert calmon.stats.sent == 2_000
            # Killed mid-stream: no graceful shutdown, connections reset.
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
            down_at = time.monotonic()
            for part in range(10, 30):
                log(part)
                time.sleep(1.55)
            assert calmon.stats.sent == 2_000 and calmon.stats.retried > 0
        assert time.monotonic() - down_at >= 30
        with _server(url, port, tmp_path):
            wait_until(lambda: _up(probe), STARTUP_SECONDS, "calmon to start again")
            assert calmon.flush(timeout=120)
            stats = calmon.stats
            assert (stats.sent, stats.dropped, stats.rejected) == (6_000, 0, 0), stats
            reading = probe.calibration("glyphs", window="24h")
            assert reading.n_predictions == 3_000 and reading.n_labeled == 3_000
            assert calmon.close()
            probe.close()


def _up(client: Calmon) -> bool:
    try:
        client.contract("nobody")
    except RequestFailed:
        return True
    except Unreachable:
        return False
    return True
