"""Run the app under gunicorn (gthread workers, graceful shutdown).

The settings and hooks live here once and serve both ways of starting calmon: ``calmon serve``
(:func:`serve`) and plain ``gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'``, whose
config file applies :func:`gunicorn_settings`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

GRACEFUL_TIMEOUT_SECONDS = 30
# A worker silent for this long is killed and replaced (large ingest batches take seconds).
WORKER_TIMEOUT_SECONDS = 120

# The defaults of `calmon serve` and of deploy/gunicorn.conf.py.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 4


class CalmonServer(BaseApplication):  # type: ignore[misc]
    """A gunicorn application that builds calmon through its factory in each worker."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from service import create_app

        return create_app()


def prepare_multiprocess_metrics() -> Path:
    """Point prometheus-client at a fresh, empty directory shared by this server's workers.

    Must run before any worker imports ``prometheus_client``; ``PROMETHEUS_MULTIPROC_DIR`` may be
    set by the operator (it is then wiped), otherwise a temporary directory is made.
    """
    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    path = Path(configured) if configured else Path(tempfile.mkdtemp(prefix="calmon-metrics-"))
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def on_starting(_server: Any) -> None:
    """gunicorn hook, in the master before any worker forks: prepare the metrics directory."""
    prepare_multiprocess_metrics()


def child_exit(_server: Any, worker: Any) -> None:
    """gunicorn hook, in the master: drop a dead worker's live gauges from the metric files."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def gunicorn_settings(*, bind: str, workers: int, threads: int) -> dict[str, Any]:
    """Return the gunicorn settings of a calmon server listening on ``bind`` (``host:port``).

    ``threads`` > 1 selects gthread workers; SIGTERM drains in-flight requests for up to
    ``GRACEFUL_TIMEOUT_SECONDS``. Counters and histograms add up across workers through
    prometheus-client's multiprocess mode (``on_starting`` and ``child_exit``).
    """
    return {
        "bind": bind,
        "workers": workers,
        "worker_class": "gthread" if threads > 1 else "sync",
        "threads": threads,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "timeout": WORKER_TIMEOUT_SECONDS,
        "accesslog": None,
        "on_starting": on_starting,
        "child_exit": child_exit,
    }


def _positive_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {raw!r}")
    return value


def gunicorn_settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return :func:`gunicorn_settings` with ``CALMON_BIND``, ``WEB_CONCURRENCY`` (workers) and
    ``CALMON_THREADS`` from ``environ`` (default ``os.environ``), each defaulting to what
    ``calmon serve`` does without options (``127.0.0.1:8000``, 2 workers, 4 threads).

    Raises ``ValueError`` naming the variable when a number does not parse or is below 1.
    """
    env = os.environ if environ is None else environ
    return gunicorn_settings(
        bind=env.get("CALMON_BIND", "").strip() or f"{DEFAULT_HOST}:{DEFAULT_PORT}",
        workers=_positive_int(env, "WEB_CONCURRENCY", DEFAULT_WORKERS),
        threads=_positive_int(env, "CALMON_THREADS", DEFAULT_THREADS),
    )


def serve(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    workers: int = DEFAULT_WORKERS,
    threads: int = DEFAULT_THREADS,
) -> None:
    """Serve on ``host:port`` with ``workers`` processes; SIGTERM drains in-flight requests.

    Counters and histograms add up across workers through prometheus-client's multiprocess mode.
    """
    CalmonServer(gunicorn_settings(bind=f"{host}:{port}", workers=workers, threads=threads)).run()
