"""Replies serialised through their declarations, and the error envelope's declaration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from flask import Response
from pydantic import MISSING, Field

from service.common.replies import Reply


class ErrorDetail(Reply):
    """One invalid field: its path, what is wrong, and the batch item it belongs to."""

    field: str
    message: str
    item: int | MISSING = MISSING


class ErrorBody(Reply):
    """An error: a stable ``code``, a message, and the details (at most a bounded number;
    ``details_total`` counts them all)."""

    code: str
    message: str
    details: list[ErrorDetail]
    details_total: Annotated[int, Field(ge=0)]


class Error(Reply):
    """Every 4xx and 5xx reply."""

    error: ErrorBody


class Status(Reply):
    """Liveness and readiness."""

    status: str
    database: str | MISSING = MISSING
    #: Why an acknowledged write might not survive a failover (``service.db.failover``).
    warnings: list[str] | MISSING = MISSING


def reply(
    declared: type[Reply],
    data: object,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """``data`` (a domain object the declaration reads by attribute, or a mapping) checked
    against its declaration and sent as JSON: a key of a mapping the declaration does not list,
    or a value of another type, raises ``pydantic.ValidationError``."""
    body = declared.model_validate(data).model_dump_json(exclude_unset=True)
    return Response(body, status=status, headers=headers, mimetype="application/json")
