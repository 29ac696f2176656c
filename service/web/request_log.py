"""Request ids and one structured log line per request (never a token, never a body).

The method is logged as the metrics label it (``OTHER`` for a non-standard one), and the route
as its template: a client cannot write arbitrary text into the log.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from flask import Flask, Response, g, request

from service.export.instruments import method_label
from service.web.route_names import route_template

log = logging.getLogger("service.requests")
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")


def init_request_log(app: Flask) -> None:
    """Give every request an id (``X-Request-ID``, kept when the client sent a safe one)."""

    @app.before_request
    def _assign_id() -> None:
        incoming = request.headers.get("X-Request-ID", "")
        g.request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        g.request_logged_start = time.perf_counter()

    @app.after_request
    def _log(response: Response) -> Response:
        request_id = g.get("request_id")
        if request_id is None:
            return response
        response.headers["X-Request-ID"] = request_id
        principal = g.get("principal")
        log.info(
            "request",
            extra={
                "request_id": request_id,
                "method": method_label(request.method),
                "route": route_template(request.url_rule),
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - g.request_logged_start) * 1000, 2),
                "principal": principal.name if principal is not None else None,
            },
        )
        return response
