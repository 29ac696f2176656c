"""The envelope even for an error that escapes Flask's handlers (one raised at teardown, or while
the reply is written out), which the WSGI server would otherwise answer with its own HTML page.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from service.db.errors import database_unavailable
from service.web.http_errors import RETRY_AFTER_SECONDS

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _envelope(code: str, message: str) -> bytes:
    return orjson.dumps(
        {"error": {"code": code, "message": message, "details": [], "details_total": 0}}
    )


class LastResort:
    """Wrap a WSGI application so that an exception it raises becomes a JSON 500 envelope, or
    503 ``database_unavailable`` with ``Retry-After`` when the database was lost; the status
    and headers the application had set are replaced (they were not sent yet)."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        started = False

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            nonlocal started
            started = True
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, start)
        except Exception as exc:
            log.exception("error outside the request handlers")
            headers = [("Content-Type", "application/json")]
            if database_unavailable(exc):
                status = "503 SERVICE UNAVAILABLE"
                body = _envelope(
                    "database_unavailable",
                    "the database is unavailable or could not complete the request; retry shortly",
                )
                headers.append(("Retry-After", str(RETRY_AFTER_SECONDS)))
            else:
                status = "500 INTERNAL SERVER ERROR"
                body = _envelope("internal_error", "an internal error occurred")
            headers.append(("Content-Length", str(len(body))))
            start_response(status, headers, sys.exc_info() if started else None)
            return [body]
