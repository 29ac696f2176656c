"""API tokens: stored hashed, looked up by digest."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth import Principal, Role
from service.storage.models import ApiToken


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


def principal_for_digest(session: Session, digest: str) -> Principal | None:
    """The live (not revoked) token holder with this digest, if any."""
    row = session.execute(
        select(ApiToken.name, ApiToken.role).where(
            ApiToken.token_sha256 == digest, ApiToken.revoked_at.is_(None)
        )
    ).first()
    return None if row is None else Principal(name=row.name, role=Role(row.role))


def token_name_taken(session: Session, name: str) -> bool:
    return session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None
