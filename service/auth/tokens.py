"""Bearer tokens, review-page sessions and roles: who may do what. No Flask, no SQL.

Roles: ``reader`` may read (every GET, the review pages); ``ingest`` may post predictions and
labels; ``gate`` may read and ask the review gate (what a CI pipeline needs, and nothing that
changes a contract); ``admin`` may do everything.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

TOKEN_PREFIX = "calmon_"
BOOTSTRAP_ADMIN_NAME = "bootstrap-admin"
#: Longest token name (the ``api_tokens.name`` column), in characters.
MAX_TOKEN_NAME = 100


def token_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a token, or None: 1 to ``MAX_TOKEN_NAME`` characters of valid
    Unicode without control characters (a newline would forge a line of ``calmon token list``)
    or line and paragraph separators."""
    if not 0 < len(name) <= MAX_TOKEN_NAME:
        return f"must be 1 to {MAX_TOKEN_NAME} characters long, got {len(name)}"
    for char in name:
        if unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp"):
            return f"must not contain the control character {char!a}"
    return None


class Role(StrEnum):
    READER = "reader"
    INGEST = "ingest"
    GATE = "gate"
    ADMIN = "admin"


class Permission(StrEnum):
    READ = "read"
    INGEST = "ingest"
    GATE = "gate"
    ADMIN = "admin"


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.INGEST: frozenset({Permission.INGEST}),
    Role.GATE: frozenset({Permission.READ, Permission.GATE}),
    Role.ADMIN: frozenset(Permission),
}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``name`` is what audit records show; never the token."""

    name: str
    role: Role

    def may(self, permission: Permission) -> bool:
        return permission in GRANTS[self.role]


def new_token() -> str:
    """Return a fresh random token (256 bits of entropy, URL-safe)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """SHA-256 hex digest of a token: what is stored.

    A plain hash suffices: tokens are 256-bit random strings, not guessable passwords.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: How long a review-page sign-in lasts, from sign-in (not extended by use).
SESSION_LIFETIME = timedelta(hours=12)


def new_session_id() -> str:
    """A fresh review-page session id (256 bits, URL-safe); only its digest is stored."""
    return secrets.token_urlsafe(32)


def session_digest(session_id: str) -> str:
    """SHA-256 hex digest of a session id: the stored key of the session."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def session_binding(session_id: str, token_sha256: str) -> str:
    """HMAC-SHA256 of the signing-in token's digest under the session id.

    Stored with the session, it ties the session to the token it was opened with, without
    storing anything of the token that the database alone could confirm: checking it needs the
    session id, which only the browser holds. The bootstrap admin token, never stored, is
    checked this way.
    """
    return hmac.new(session_id.encode("utf-8"), token_sha256.encode(), hashlib.sha256).hexdigest()
