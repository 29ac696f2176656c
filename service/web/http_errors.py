"""One JSON error envelope for every failure: ``{"error": {"code", "message", "details",
"details_total"}}``.

A reply is bounded whatever the request held: it lists at most ``MAX_DETAILS`` details (the first
ones found) and says in ``details_total`` how many there were, and every text it quotes (a
message, a detail's field path or message) is cut in the middle to at most
``service.common.json_paths.MAX_TEXT`` characters. The number of batch items the details name,
counted before the cut, is kept on the request (``g.rejected_request``) for
``calmon_rejected_items_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, g, has_request_context, jsonify
from sqlalchemy.exc import DBAPIError
from werkzeug.exceptions import HTTPException

from service.common.errors import MAX_DETAILS, CalmonError, Conflict, NotFound, ValidationFailed
from service.common.json_paths import shorten
from service.db.errors import DRIVER_ERROR, database_unavailable

log = logging.getLogger(__name__)

#: Seconds a client is asked to wait before sending a request the database could not serve.
RETRY_AFTER_SECONDS = 5

_STATUS_BY_ERROR: tuple[tuple[type[CalmonError], int], ...] = (
    (ValidationFailed, 422),
    (NotFound, 404),
    (Conflict, 409),
)

_CODE_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


class ApiError(Exception):
    """An error raised at the HTTP edge (auth, body parsing), with its status.

    ``details`` may be the first of more problems: ``details_total`` then says how many were
    found and ``items`` how many batch items they concern (else both are counted from
    ``details``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        *,
        details_total: int | None = None,
        items: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODE_BY_STATUS.get(status, "error")
        self.message = message
        self.details = details or []
        self.headers = headers or {}
        self.details_total = details_total
        self.items = items


@dataclass(frozen=True)
class RejectedRequest:
    """What the metrics keep of an error reply: its code and how many batch items its details
    named (all of them, not only those the reply lists)."""

    code: str
    items: int


def _bounded(detail: dict[str, Any]) -> dict[str, Any]:
    return {k: shorten(v) if isinstance(v, str) else v for k, v in detail.items()}


def _items_named(details: Sequence[dict[str, Any]]) -> int:
    return len({d["item"] for d in details if d.get("item") is not None})


def error_response(
    status: int,
    code: str,
    message: str,
    details: Sequence[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    *,
    details_total: int | None = None,
    items: int | None = None,
) -> Response:
    """Build the error envelope: at most ``MAX_DETAILS`` of ``details``, every text shortened
    (``shorten``), and ``details_total`` (default: how many ``details`` there are).

    ``items`` is how many batch items the details concern (default: the distinct ``item``
    indices of ``details``); it is kept on the request for the rejected-items counter.
    """
    details = details or []
    body = {
        "error": {
            "code": code,
            "message": shorten(message),
            "details": [_bounded(d) for d in details[:MAX_DETAILS]],
            "details_total": len(details) if details_total is None else details_total,
        }
    }
    if has_request_context():
        g.rejected_request = RejectedRequest(
            code, _items_named(details) if items is None else items
        )
    response = jsonify(body)
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def database_unavailable_response() -> Response:
    """503 ``database_unavailable`` with ``Retry-After``: the database is lost, shut down, out of
    resources or taking no writes; the request wrote nothing and may be sent again."""
    return error_response(
        503,
        "database_unavailable",
        "the database is unavailable or could not complete the request; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def database_error_response(driver_error: object, exc: BaseException) -> Response:
    """The reply to a database error ``exc`` (``driver_error`` is what the driver raised): 503
    when the database cannot serve now (``service.db.errors.database_unavailable``), else 500;
    the log names the driver's error class, never its message (which may quote values)."""
    if database_unavailable(exc):
        log.warning("database unavailable: %s", type(driver_error).__name__)
        return database_unavailable_response()
    log.error("database error: %s", type(driver_error).__name__)
    return error_response(500, "internal_error", "the database rejected the operation")


def register_error_handlers(app: Flask) -> None:
    """Map domain errors, HTTP exceptions and database outages to the envelope; never a trace."""

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return error_response(
            exc.status,
            exc.code,
            exc.message,
            exc.details,
            exc.headers,
            details_total=exc.details_total,
            items=exc.items,
        )

    @app.errorhandler(CalmonError)
    def _domain_error(exc: CalmonError) -> Response:
        status = next((s for cls, s in _STATUS_BY_ERROR if isinstance(exc, cls)), 400)
        return error_response(
            status,
            exc.code,
            exc.message,
            [d.to_dict() for d in exc.details[:MAX_DETAILS]],
            details_total=exc.details_total,
            items=exc.items,
        )

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"request body exceeds the limit of {limit} bytes (CALMON_MAX_BODY_BYTES)"
        response = error_response(status, _CODE_BY_STATUS.get(status, "error"), message)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(DBAPIError)
    def _database_error(exc: DBAPIError) -> Response:
        return database_error_response(exc.orig if exc.orig is not None else exc, exc)

    @app.errorhandler(DRIVER_ERROR)
    def _driver_error(exc: Exception) -> Response:
        # A psycopg error no storage module translated: the same rules.
        return database_error_response(exc, exc)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "an internal error occurred")
