"""Bearer authentication and per-route permissions."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from flask import current_app, g, request

from service.api.errors import ApiError
from service.api.session import db_session
from service.auth import (
    BOOTSTRAP_ADMIN_NAME,
    Permission,
    Principal,
    Role,
    digests_match,
    token_digest,
)
from service.storage.tokens import principal_for_digest

F = TypeVar("F", bound=Callable[..., Any])


#: The cookie the review page's sign-in form sets (HttpOnly, Secure, SameSite=Strict).
TOKEN_COOKIE = "calmon_token"


def _bearer_token(allow_cookie: bool = False) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if not header and allow_cookie and request.cookies.get(TOKEN_COOKIE):
        return request.cookies[TOKEN_COOKIE]
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer realm="calmon"'},
        )
    return token.strip()


def resolve_token(token: str) -> Principal | None:
    """The principal a token stands for, if any (bootstrap admin or a stored, live token)."""
    digest = token_digest(token)
    bootstrap = current_app.config["CALMON_SETTINGS"].admin_token
    if bootstrap and digests_match(digest, token_digest(bootstrap)):
        return Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN)
    return principal_for_digest(db_session(), digest)


def authenticate(allow_cookie: bool = False) -> Principal:
    """Resolve the request's bearer token (or, for read-only pages, the sign-in cookie) to a
    principal, or raise 401."""
    principal = resolve_token(_bearer_token(allow_cookie))
    if principal is None:
        raise ApiError(
            401,
            "invalid or revoked token",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return principal


def requires(permission: Permission, *, allow_cookie: bool = False) -> Callable[[F], F]:
    """Decorate a view so it runs only for a principal holding ``permission`` (else 401/403).

    ``allow_cookie`` also accepts the review page's sign-in cookie (read-only views only).
    """

    def decorator(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            principal = authenticate(allow_cookie)
            if not principal.may(permission):
                raise ApiError(
                    403,
                    f"role '{principal.role}' may not {permission.value} (this route needs "
                    f"the '{permission.value}' permission)",
                )
            g.principal = principal
            return view(*args, **kwargs)

        wrapper.required_permission = permission  # type: ignore[attr-defined]
        return cast(F, wrapper)

    return decorator


def current_principal() -> Principal:
    """The principal of the current request (after ``requires``)."""
    return cast(Principal, g.principal)
