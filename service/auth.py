"""Bearer tokens and roles: who may do what. No Flask, no SQL."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum

TOKEN_PREFIX = "calmon_"
BOOTSTRAP_ADMIN_NAME = "bootstrap-admin"


class Role(StrEnum):
    READER = "reader"
    INGEST = "ingest"
    ADMIN = "admin"


class Permission(StrEnum):
    READ = "read"
    INGEST = "ingest"
    ADMIN = "admin"


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.INGEST: frozenset({Permission.INGEST}),
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


def digests_match(a: str, b: str) -> bool:
    """Compare two digests in constant time."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))
