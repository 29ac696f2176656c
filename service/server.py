"""Run the app under gunicorn (gthread workers, graceful shutdown).

The settings and hooks live here once and serve both ways of starting calmon: ``calmon serve``
(:func:`serve`) and plain ``gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'``, whose
config file applies :func:`gunicorn_settings_from_env`. Both take their defaults from
``Settings`` (``bind``, ``workers``, ``threads``).

The workers are gunicorn's own with one change: a request gunicorn refuses before calmon sees it
(a request line over ``limit_request_line``, header fields over ``limit_request_fields`` or
``limit_request_field_size``, a malformed request) is answered with calmon's JSON error envelope
instead of gunicorn's HTML page (:class:`JsonErrorReplies`).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from http import HTTPStatus
from pathlib import Path
from typing import Any

from gunicorn import util
from gunicorn.app.base import BaseApplication
from gunicorn.http import errors
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from service.config import Settings, load_settings

log = logging.getLogger(__name__)

GRACEFUL_TIMEOUT_SECONDS = 30
# A worker silent for this long is killed and replaced (large ingest batches take seconds).
WORKER_TIMEOUT_SECONDS = 120


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


def refusal(exc: BaseException) -> tuple[int, str, str]:
    """The status, code and message of the reply to a request gunicorn could not hand to
    calmon because of ``exc``: 414, 431, 400 and the like for what the client sent, 500 for
    anything else."""
    if isinstance(exc, errors.InvalidResponseHeader | errors.InvalidResponseHeaderName):
        return 500, "internal_error", "an internal error occurred"
    if isinstance(exc, errors.LimitRequestLine):
        return (
            414,
            "uri_too_long",
            "the request line (method, path and query) is longer than the server takes",
        )
    if isinstance(exc, errors.LimitRequestHeaders):
        return (
            431,
            "request_header_fields_too_large",
            "the request has more header fields, or a longer one, than the server takes",
        )
    if isinstance(exc, errors.UnsupportedTransferCoding):
        return 501, "not_implemented", "the request's Transfer-Encoding is not supported"
    if isinstance(exc, errors.ExpectationFailed):
        return 417, "expectation_failed", "the request's Expect header cannot be met"
    if isinstance(exc, errors.ForbiddenProxyRequest | ssl.SSLError):
        return 403, "forbidden", "the request is not allowed"
    if isinstance(exc, errors.ParseException) and not isinstance(exc, errors.ConfigurationProblem):
        return 400, "bad_request", f"the HTTP request is malformed ({type(exc).__name__})"
    return 500, "internal_error", "an internal error occurred"


def refusal_bytes(status: int, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 reply carrying the error envelope; the connection closes after it."""
    body = json.dumps(
        {"error": {"code": code, "message": message, "details": [], "details_total": 0}}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class JsonErrorReplies:
    """A gunicorn worker whose own error replies are calmon's JSON envelope (gunicorn writes an
    HTML page). Mixed in before gunicorn's worker class."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        status, code, message = refusal(exc)
        if status == 500:
            log.exception("error outside calmon while handling a request")
        else:
            log.warning("request refused by gunicorn (%s): %s", status, type(exc).__name__)
        try:
            util.write_nonblock(client, refusal_bytes(status, code, message))
        except Exception:  # the client may be gone; nothing to tell it then
            log.debug("could not send the refusal")


class CalmonThreadWorker(JsonErrorReplies, ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, its error replies JSON."""


class CalmonSyncWorker(JsonErrorReplies, SyncWorker):  # type: ignore[misc]
    """gunicorn's sync worker, its error replies JSON."""


def prepare_multiprocess_metrics(settings: Settings | None = None) -> Path:
    """Point prometheus-client at a fresh, empty directory shared by this server's workers.

    Must run before any worker imports ``prometheus_client``. The operator's
    ``PROMETHEUS_MULTIPROC_DIR`` (``Settings.metrics_dir``) is wiped and reused; otherwise a
    temporary directory is made. The directory is exported for the workers.
    """
    configured = (settings or load_settings()).metrics_dir
    path = Path(configured) if configured else Path(tempfile.mkdtemp(prefix="calmon-metrics-"))
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def on_starting(_server: Any) -> None:
    """gunicorn hook, in the master before any worker forks: prepare the metrics directory."""
    prepare_multiprocess_metrics()


def post_worker_init(_worker: Any) -> None:
    """gunicorn hook, in each worker once it has built the app: move every object alive now
    (modules, the app, the engine, SQLAlchemy's and numpy's state) out of the cyclic garbage
    collector's reach (``gc.freeze``).

    A prediction batch parses into some 130,000 containers that live until its response; each
    batch therefore triggers a full collection, which would otherwise walk the whole
    long-lived heap again.
    """
    gc.freeze()


def child_exit(_server: Any, worker: Any) -> None:
    """gunicorn hook, in the master: drop a dead worker's live gauges from the metric files."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def gunicorn_settings(*, bind: str, workers: int, threads: int) -> dict[str, Any]:
    """Return the gunicorn settings of a calmon server listening on ``bind`` (``host:port``).

    ``threads`` > 1 selects gthread workers (``CalmonThreadWorker``, else ``CalmonSyncWorker``:
    gunicorn's, their own error replies JSON); SIGTERM drains in-flight requests for up to
    ``GRACEFUL_TIMEOUT_SECONDS``. Counters and histograms add up across workers through
    prometheus-client's multiprocess mode (``on_starting`` and ``child_exit``); each worker
    freezes its start-up heap out of the garbage collector's full passes (``post_worker_init``);
    gunicorn's control socket is off, so servers of one user share no socket.
    """
    return {
        "bind": bind,
        "workers": workers,
        "worker_class": CalmonThreadWorker if threads > 1 else CalmonSyncWorker,
        "threads": threads,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "timeout": WORKER_TIMEOUT_SECONDS,
        "accesslog": None,
        "on_starting": on_starting,
        "post_worker_init": post_worker_init,
        "child_exit": child_exit,
        # gunicorn's control socket (gunicornc) is one path per user, by default
        # ~/.gunicorn/gunicorn.ctl: a second server of the same user would take it over from
        # the first. calmon is managed through signals and its orchestrator instead.
        "control_socket_disable": True,
    }


def gunicorn_settings_of(settings: Settings) -> dict[str, Any]:
    """:func:`gunicorn_settings` with ``settings``' bind, workers and threads."""
    return gunicorn_settings(bind=settings.bind, workers=settings.workers, threads=settings.threads)


def gunicorn_settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`gunicorn_settings_of` the settings of ``environ`` (default ``os.environ``):
    ``CALMON_BIND``, ``WEB_CONCURRENCY`` (workers) and ``CALMON_THREADS``, each defaulting to
    what ``calmon serve`` does without options.

    Raises ``ValueError`` naming the variable when a number does not parse or is below 1.
    """
    return gunicorn_settings_of(load_settings(environ=environ))


def serve(settings: Settings) -> None:
    """Serve with ``settings``' bind, workers and threads (``serve_settings`` applies the
    options of ``calmon serve``).

    SIGTERM drains in-flight requests; counters and histograms add up across workers through
    prometheus-client's multiprocess mode.
    """
    CalmonServer(gunicorn_settings_of(settings)).run()


def serve_settings(
    settings: Settings,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    threads: int | None = None,
) -> Settings:
    """``settings`` with the ``calmon serve`` options that were given."""
    default_host, _, default_port = settings.bind.rpartition(":")
    return replace(
        settings,
        bind=f"{host or default_host}:{port or default_port}",
        workers=workers or settings.workers,
        threads=threads or settings.threads,
    )
