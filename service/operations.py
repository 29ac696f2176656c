"""Use cases that own their transaction: each validates, writes through storage, commits once."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.auth import Role, new_token, token_digest
from service.errors import Conflict
from service.storage import audit
from service.storage.tokens import insert_token, token_name_taken


def utcnow() -> datetime:
    return datetime.now(UTC)


def create_token(session: Session, *, role: Role, name: str, actor: str) -> str:
    """Create a token for ``role``, store its digest and an audit event; return the token once."""
    if token_name_taken(session, name):
        raise Conflict(f"a token named {name!r} already exists")
    token = new_token()
    now = utcnow()
    insert_token(
        session, name=name, role=role, digest=token_digest(token), created_by=actor, now=now
    )
    audit.append_event(
        session,
        type="token_created",
        actor=actor,
        now=now,
        details={"name": name, "role": role.value},
    )
    session.commit()
    return token

