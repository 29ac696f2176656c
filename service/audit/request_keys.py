"""Audited writes done once per ``Idempotency-Key``: a contract registration or fit, a
retirement, a gate decision.

A client that sends a key with such a write and gets no answer it can trust (a 503, a lost
connection: the commit's outcome is unknown) sends the same request with the same key again.
The write stores its key in its own transaction (``remember``); the retry finds it
(``prior_result``) and gets the first write's result instead of making a second contract
version or a second decision. The key names one request: the same key with another operation
or another body is a conflict.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.common.errors import Conflict
from service.db.models import RequestKeyRecord

#: The longest key taken, in characters.
MAX_KEY_LENGTH = 200


@dataclass(frozen=True)
class RequestKey:
    """A client's ``Idempotency-Key`` for one ``operation`` (an OpenAPI operation id) with the
    SHA-256 (hex) of the request's body."""

    key: str
    operation: str
    request_sha256: str


def prior_result(session: Session, request_key: RequestKey | None) -> str | None:
    """The id of what the write named by ``request_key`` made before, or None (no key, or a
    key not seen yet); ``Conflict`` when the key named another operation or another body."""
    if request_key is None:
        return None
    row = session.scalars(
        select(RequestKeyRecord).where(RequestKeyRecord.key == request_key.key)
    ).one_or_none()
    if row is None:
        return None
    if row.operation != request_key.operation or row.request_sha256 != request_key.request_sha256:
        raise Conflict(
            f"Idempotency-Key {request_key.key!r} was sent with another request "
            f"({row.operation}); a key names one request"
        )
    return row.result_id


def remember(
    session: Session, request_key: RequestKey | None, result_id: str, now: datetime
) -> None:
    """Store ``request_key`` with the id of what this write made (in the caller's transaction);
    ``Conflict`` when a request with the same key was stored meanwhile (sent twice at once)."""
    if request_key is None:
        return
    session.add(
        RequestKeyRecord(
            key=request_key.key,
            operation=request_key.operation,
            request_sha256=request_key.request_sha256,
            result_id=result_id,
            created_at=now,
        )
    )
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        raise Conflict(
            f"a request with Idempotency-Key {request_key.key!r} was stored meanwhile: send it "
            "again for its result"
        ) from None
