"""Run the app under gunicorn (gthread workers, graceful shutdown)."""

from __future__ import annotations

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


def serve(*, host: str, port: int, workers: int, threads: int = 4) -> None:
    """Serve on ``host:port`` with ``workers`` processes; SIGTERM drains in-flight requests."""
    CalmonServer(
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "gthread" if threads > 1 else "sync",
            "threads": threads,
            "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
            "timeout": 120,
            "accesslog": None,
        }
    ).run()
