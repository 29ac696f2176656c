"""Review-page sessions: stored by the SHA-256 of their id, never the id itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.db.models import UiSession


@dataclass(frozen=True)
class StoredSession:
    """A live session row: the token it was opened with (``token_id`` None for the bootstrap
    admin) and the binding that ties it to that token."""

    token_id: int | None
    token_binding: str
    principal: str
    role: str
    expires_at: datetime


def insert_session(
    session: Session,
    *,
    id_sha256: str,
    token_id: int | None,
    token_binding: str,
    principal: str,
    role: str,
    now: datetime,
    expires_at: datetime,
) -> None:
    session.add(
        UiSession(
            id_sha256=id_sha256,
            token_id=token_id,
            token_binding=token_binding,
            principal=principal,
            role=role,
            created_at=now,
            expires_at=expires_at,
        )
    )
    session.flush()


def live_session(session: Session, id_sha256: str, now: datetime) -> StoredSession | None:
    """The unexpired session with this id digest, if any."""
    row = session.scalar(
        select(UiSession).where(UiSession.id_sha256 == id_sha256, UiSession.expires_at > now)
    )
    if row is None:
        return None
    return StoredSession(row.token_id, row.token_binding, row.principal, row.role, row.expires_at)


def delete_session(session: Session, id_sha256: str) -> None:
    session.execute(delete(UiSession).where(UiSession.id_sha256 == id_sha256))


def delete_token_sessions(session: Session, token_id: int) -> int:
    """End every session opened with a token; the number ended."""
    result = session.execute(delete(UiSession).where(UiSession.token_id == token_id))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def delete_expired(session: Session, now: datetime) -> None:
    session.execute(delete(UiSession).where(UiSession.expires_at <= now))
