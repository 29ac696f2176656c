"""Use cases of tokens and review-page sessions; each commits once."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.audit import store as audit
from service.audit.events import TokenCreated, TokenRevoked
from service.auth import session_store, token_store
from service.auth.token_store import TokenInfo
from service.auth.tokens import (
    BOOTSTRAP_ADMIN_NAME,
    SESSION_LIFETIME,
    Permission,
    Principal,
    Role,
    new_session_id,
    new_token,
    session_binding,
    session_digest,
    token_digest,
    token_name_problem,
)
from service.common.clock import utcnow
from service.common.errors import Conflict, ErrorDetail, NotFound, ValidationFailed
from service.common.hashing import digests_match


def create_token(session: Session, *, role: Role, name: str, actor: str) -> str:
    """Create a token for ``role``, store its digest and an audit event; return the token once.

    ``ValidationFailed`` naming ``name`` if it cannot name a token (``token_name_problem``)."""
    problem = token_name_problem(name)
    if problem is not None:
        raise ValidationFailed(f"invalid token name: {problem}", [ErrorDetail("name", problem)])
    if token_store.token_name_taken(session, name):
        raise Conflict(f"a token named {name!r} already exists")
    token = new_token()
    now = utcnow()
    token_store.insert_token(
        session, name=name, role=role, digest=token_digest(token), created_by=actor, now=now
    )
    audit.append_event(session, TokenCreated(name=name, role=role.value), actor=actor, now=now)
    session.commit()
    return token


def revoke_token(session: Session, *, name: str, actor: str) -> TokenInfo:
    """Revoke the live token ``name`` (it stops working at once) and audit it."""
    now = utcnow()
    revoked = token_store.revoke_token(session, name, now)
    if revoked is None:
        raise NotFound(f"no live token named {name!r}")
    token_id, info = revoked
    ended = session_store.delete_token_sessions(session, token_id)
    audit.append_event(
        session,
        TokenRevoked(name=name, role=info.role, sessions_ended=ended),
        actor=actor,
        now=now,
    )
    session.commit()
    return info


def _token_holder(
    session: Session, digest: str, bootstrap_token: str | None
) -> tuple[int | None, Principal] | None:
    """The token row id (None for the bootstrap admin) and holder of a live token's digest."""
    if bootstrap_token and digests_match(digest, token_digest(bootstrap_token)):
        return None, Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN)
    live = token_store.live_token(session, digest=digest)
    return None if live is None else (live.id, live.principal)


def resolve_token(session: Session, token: str, *, bootstrap_token: str | None) -> Principal | None:
    """The principal a bearer token stands for: the bootstrap admin or a live stored token."""
    holder = _token_holder(session, token_digest(token), bootstrap_token)
    return None if holder is None else holder[1]


def open_ui_session(
    session: Session, token: str, *, bootstrap_token: str | None
) -> tuple[str, Principal] | None:
    """Sign in to the review pages with a token that may read: store a new session (its id
    hashed, bound to the token) and return the id, for the cookie, with the principal.

    Sessions last ``SESSION_LIFETIME`` from sign-in; expired ones are purged here.
    """
    digest = token_digest(token)
    holder = _token_holder(session, digest, bootstrap_token)
    if holder is None or not holder[1].may(Permission.READ):
        return None
    token_id, principal = holder
    session_id = new_session_id()
    now = utcnow()
    session_store.delete_expired(session, now)
    session_store.insert_session(
        session,
        id_sha256=session_digest(session_id),
        token_id=token_id,
        token_binding=session_binding(session_id, digest),
        principal=principal.name,
        role=principal.role.value,
        now=now,
        expires_at=now + SESSION_LIFETIME,
    )
    session.commit()
    return session_id, principal


def ui_session_principal(
    session: Session, session_id: str, *, bootstrap_token: str | None
) -> Principal | None:
    """The principal of a live review-page session: None once it expired, was signed out, or
    its token was revoked (or the bootstrap token changed)."""
    stored = session_store.live_session(session, session_digest(session_id), utcnow())
    if stored is None:
        return None
    if stored.token_id is None:
        if not bootstrap_token:
            return None
        digest, principal = (
            token_digest(bootstrap_token),
            Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN),
        )
    else:
        live = token_store.live_token(session, token_id=stored.token_id)
        if live is None:
            return None
        digest, principal = live.digest, live.principal
    if not digests_match(stored.token_binding, session_binding(session_id, digest)):
        return None
    return principal


def close_ui_session(session: Session, session_id: str) -> None:
    """Sign out: delete the session."""
    session_store.delete_session(session, session_digest(session_id))
    session.commit()
