"""One JSON error envelope for every failure: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from sqlalchemy.exc import DBAPIError, OperationalError
from werkzeug.exceptions import HTTPException

from service.common.errors import CalmonError, Conflict, NotFound, ValidationFailed

log = logging.getLogger(__name__)

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
    """An error raised at the HTTP edge (auth, body parsing), with its status."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODE_BY_STATUS.get(status, "error")
        self.message = message
        self.details = details or []
        self.headers = headers or {}


def error_response(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """Build the error envelope."""
    response = jsonify({"error": {"code": code, "message": message, "details": details or []}})
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def register_error_handlers(app: Flask) -> None:
    """Map domain errors, HTTP exceptions and database outages to the envelope; never a trace."""

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.errorhandler(CalmonError)
    def _domain_error(exc: CalmonError) -> Response:
        status = next((s for cls, s in _STATUS_BY_ERROR if isinstance(exc, cls)), 400)
        details = [d.to_dict() for d in exc.details]
        return error_response(status, exc.code, exc.message, details)

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

    @app.errorhandler(OperationalError)
    def _database_unavailable(exc: OperationalError) -> Response:
        log.warning("database unavailable: %s", type(exc.orig).__name__ if exc.orig else exc)
        return error_response(
            503,
            "database_unavailable",
            "the database is unavailable or could not complete the request; retry shortly",
            headers={"Retry-After": "5"},
        )

    @app.errorhandler(DBAPIError)
    def _database_error(exc: DBAPIError) -> Response:
        log.error("database error: %s", type(exc.orig).__name__ if exc.orig else exc)
        return error_response(500, "internal_error", "the database rejected the operation")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "an internal error occurred")
