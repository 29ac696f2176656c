"""API tokens: stored hashed, looked up by digest."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth.tokens import Principal, Role
from service.db.models import ApiToken


def insert_token(
    session: Session, *, name: str, role: Role, digest: str, created_by: str, now: datetime
) -> None:
    """Store a new token's digest under a unique name."""
    session.add(
        ApiToken(
            name=name, role=role.value, token_sha256=digest, created_at=now, created_by=created_by
        )
    )
    session.flush()


@dataclass(frozen=True)
class LiveToken:
    """A live token's row id, digest and holder (for opening a review-page session)."""

    id: int
    digest: str
    principal: Principal


def live_token(
    session: Session, *, digest: str | None = None, token_id: int | None = None
) -> LiveToken | None:
    """The live (not revoked) token with this digest or row id, if any."""
    query = select(ApiToken.id, ApiToken.token_sha256, ApiToken.name, ApiToken.role).where(
        ApiToken.revoked_at.is_(None)
    )
    if digest is not None:
        query = query.where(ApiToken.token_sha256 == digest)
    if token_id is not None:
        query = query.where(ApiToken.id == token_id)
    row = session.execute(query).first()
    if row is None:
        return None
    return LiveToken(row.id, row.token_sha256, Principal(name=row.name, role=Role(row.role)))


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown about a token: never the token nor its digest."""

    name: str
    role: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


def list_tokens(session: Session) -> list[TokenInfo]:
    """Every token ever created, oldest first."""
    rows = session.scalars(select(ApiToken).order_by(ApiToken.id))
    return [TokenInfo(r.name, r.role, r.created_at, r.created_by, r.revoked_at) for r in rows]


def revoke_token(session: Session, name: str, now: datetime) -> tuple[int, TokenInfo] | None:
    """Mark the live token ``name`` revoked; its row id and info, or None if there is no such
    live token."""
    row = session.scalar(
        select(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
    )
    if row is None:
        return None
    row.revoked_at = now
    session.flush()
    return row.id, TokenInfo(row.name, row.role, row.created_at, row.created_by, row.revoked_at)


def token_name_taken(session: Session, name: str) -> bool:
    return session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None
