"""deploy/gunicorn.conf.py: the settings of ``calmon serve``, and a real gunicorn started with it.

``gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'`` must behave like ``calmon serve``:
the same gunicorn settings (compared setting by setting as gunicorn itself loads them), bind,
workers and threads from the environment, and the multiprocess metrics wiring that makes
``/metrics`` add up the counts of every worker.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gunicorn.app.base import Application
from gunicorn.http import errors

from service import server
from service.config import load_settings
from service.db.migrate import upgrade_to_head
from tests.deploy import DEPLOY, ROOT
from tests.deploy.conftest import parse_calmon
from tests.integration.test_served import (
    STARTUP_SECONDS,
    free_port,
    metric_samples,
    wait_until,
)

CONFIG = DEPLOY / "gunicorn.conf.py"
GUNICORN = Path(sys.executable).parent / "gunicorn"
ADMIN_TOKEN = "calmon_test-gunicorn-conf-admin-token"


class ConfigFileOnly(Application):
    """gunicorn's own loading of a config file, without its command line (pytest's argv)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__()

    def load_config(self) -> None:
        self.load_config_from_file(str(self.path))

    def load(self) -> Any:  # never called: nothing is served
        raise AssertionError("the config check must not load the app")


def loaded(cfg: Any, names: Any) -> dict[str, Any]:
    return {name: cfg.settings[name].get() for name in names}


def config_file_settings(monkeypatch: pytest.MonkeyPatch, **environ: str) -> dict[str, Any]:
    """The settings gunicorn ends up with from deploy/gunicorn.conf.py under ``environ``."""
    for name in ("CALMON_BIND", "WEB_CONCURRENCY", "CALMON_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    names = server.gunicorn_settings(bind="x", workers=1, threads=1).keys()
    return loaded(ConfigFileOnly(CONFIG).cfg, names)


def test_defaults_are_those_of_calmon_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    # What `calmon serve` without options hands gunicorn, through the CLI's own defaults.
    args = parse_calmon(["calmon", "serve"])
    settings = server.serve_settings(
        load_settings(environ={}), args.host, args.port, args.workers, args.threads
    )
    serve_app = server.CalmonServer(server.gunicorn_settings_of(settings))
    expected = loaded(serve_app.cfg, server.gunicorn_settings(bind="x", workers=1, threads=1))
    assert config_file_settings(monkeypatch) == expected
    assert expected["worker_class"] is server.CalmonThreadWorker
    assert expected["graceful_timeout"] == server.GRACEFUL_TIMEOUT_SECONDS
    assert expected["on_starting"] is server.on_starting
    assert expected["post_worker_init"] is server.post_worker_init
    assert expected["child_exit"] is server.child_exit


def test_a_worker_freezes_its_start_up_heap() -> None:
    gc.unfreeze()
    try:
        server.post_worker_init(None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_bind_workers_and_threads_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = config_file_settings(
        monkeypatch, CALMON_BIND="0.0.0.0:9000", WEB_CONCURRENCY="5", CALMON_THREADS="1"
    )
    assert settings["bind"] == ["0.0.0.0:9000"]
    assert settings["workers"] == 5
    assert settings["threads"] == 1
    assert settings["worker_class"] is server.CalmonSyncWorker


@pytest.mark.parametrize(
    ("name", "value"),
    [("WEB_CONCURRENCY", "two"), ("WEB_CONCURRENCY", "0"), ("CALMON_THREADS", "-1")],
)
def test_a_bad_number_is_refused_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        server.gunicorn_settings_from_env({name: value})


@dataclass
class Gunicorn:
    url: str
    process: subprocess.Popen[bytes]
    metrics_dir: Path

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return response.status, response.read().decode()

    def worker_pids(self) -> set[int]:
        """Pids of the processes that wrote metric files: gunicorn workers, if wired right."""
        return {int(p.stem.rsplit("_", 1)[1]) for p in self.metrics_dir.glob("*_*.db")}


@contextmanager
def gunicorn_with_the_config_file(tmp_path: Path, **environ: str) -> Iterator[Gunicorn]:
    url = f"sqlite:///{tmp_path / 'calmon.db'}"
    upgrade_to_head(url)
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"left over by a previous run")
    port = free_port()
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_ADMIN_TOKEN": ADMIN_TOKEN,
        "CALMON_LOG_LEVEL": "WARNING",
        "CALMON_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        **environ,
    }
    env.pop("CALMON_THREADS", None)
    log = (tmp_path / "gunicorn.log").open("wb")
    process = subprocess.Popen(
        [str(GUNICORN), "-c", str(CONFIG), "service:create_app()"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    served = Gunicorn(f"http://127.0.0.1:{port}", process, metrics_dir)
    try:
        wait_until(lambda: served.get("/healthz")[0] == 200, STARTUP_SECONDS, "gunicorn to start")
        yield served
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def children_of(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux /proc)."""
    children = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:  # the process went away while we looked
            continue
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(pid):
            children.add(int(status.parent.name))
    return children


def answer_from_every_worker(served: Gunicorn, workers: set[int]) -> int:
    """Send /healthz until every worker has answered some; return how many were answered.

    First a concurrent burst. The kernel hands each connection to whichever worker wakes first,
    so one worker may well take them all: then the workers that did answer are paused (SIGSTOP)
    for one more request, which only the others can accept, and resumed.
    """
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda _: served.get("/healthz")[0], range(32)))
    assert statuses == [200] * 32
    answered = len(statuses)
    for _ in workers:
        done = served.worker_pids() & workers
        if done == workers:
            break
        for pid in done:
            os.kill(pid, signal.SIGSTOP)
        try:
            assert served.get("/healthz")[0] == 200
            answered += 1
        finally:
            for pid in done:
                os.kill(pid, signal.SIGCONT)
    return answered


@pytest.mark.slow
def test_gunicorn_serves_and_metrics_add_up_across_two_workers(tmp_path: Path) -> None:
    with gunicorn_with_the_config_file(tmp_path) as served:
        # on_starting ran: the operator's directory was wiped before the workers started.
        assert not (served.metrics_dir / "counter_999999.db").exists()

        def two_workers() -> set[int] | None:
            children = children_of(served.process.pid)
            return children if len(children) == 2 else None

        workers = wait_until(two_workers, STARTUP_SECONDS, "2 workers under the master")
        answered = 1 + answer_from_every_worker(served, workers)  # 1: the start-up probe
        # Each worker wrote its own metric files (prometheus-client's multiprocess mode).
        assert served.worker_pids() == workers, (
            f"metric files of {sorted(served.worker_pids())}, workers {sorted(workers)}"
        )

        status, text = served.get("/metrics")
        assert status == 200
        key = (
            "calmon_http_request_duration_seconds_count",
            (("endpoint", "/healthz"), ("method", "GET"), ("status", "200")),
        )
        # One worker answered this scrape, with the requests of both.
        assert metric_samples(text)[key] == answered
        process = served.process
    assert process.returncode == 0, (tmp_path / "gunicorn.log").read_text()


@pytest.mark.slow
def test_two_servers_of_one_user_share_no_control_socket(tmp_path: Path) -> None:
    # gunicorn's control socket defaults to $XDG_RUNTIME_DIR/gunicorn.ctl, else
    # ~/.gunicorn/gunicorn.ctl: one path per user, which a second server would take over.
    home, runtime = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    runtime.mkdir()
    for name, xdg in (("one", str(runtime)), ("two", "")):
        (tmp_path / name).mkdir()
        with gunicorn_with_the_config_file(
            tmp_path / name, HOME=str(home), XDG_RUNTIME_DIR=xdg
        ) as served:
            assert served.get("/healthz")[0] == 200
            assert not (runtime / "gunicorn.ctl").exists()
            assert not (home / ".gunicorn").exists()
    assert server.gunicorn_settings(bind="x", workers=1, threads=1)["control_socket_disable"]


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.LimitRequestLine(5000, 4094), 414, "uri_too_long"),
        (errors.LimitRequestHeaders("too many headers"), 431, "request_header_fields_too_large"),
        (errors.InvalidRequestLine("GARBAGE"), 400, "bad_request"),
        (errors.InvalidHeaderName("Bad Name"), 400, "bad_request"),
        (errors.UnsupportedTransferCoding("gzip"), 501, "not_implemented"),
        (errors.InvalidResponseHeaderName("x y"), 500, "internal_error"),
        (errors.ConfigurationProblem("bad"), 500, "internal_error"),
        (RuntimeError("boom"), 500, "internal_error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_gunicorns_refusals_map_to_statuses_and_codes(
    exc: Exception, status: int, code: str
) -> None:
    assert server.refusal(exc)[:2] == (status, code)
    reply = server.refusal_bytes(*server.refusal(exc))
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"Content-Type: application/json" in head and b"Connection: close" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["error"]["code"] == code
