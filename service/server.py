"""Run the app under gunicorn (gthread workers, graceful shutdown)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

GRACEFUL_TIMEOUT_SECONDS = 30


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


def _child_exit(_server: Any, worker: Any) -> None:
    """Drop a dead worker's live gauges from the multiprocess files."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def serve(*, host: str, port: int, workers: int, threads: int = 4) -> None:
    """Serve on ``host:port`` with ``workers`` processes; SIGTERM drains in-flight requests.

    Counters and histograms add up across workers through prometheus-client's multiprocess mode.
    """
    prepare_multiprocess_metrics()
    CalmonServer(
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "gthread" if threads > 1 else "sync",
            "threads": threads,
            "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
            "timeout": 120,
            "accesslog": None,
            "child_exit": _child_exit,
        }
    ).run()
