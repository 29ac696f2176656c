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


def _bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer realm="calmon"'},
        )
    return token.strip()


def authenticate() -> Principal:
    """Resolve the request's bearer token to a principal, or raise 401."""
    digest = token_digest(_bearer_token())
    bootstrap = current_app.config["CALMON_SETTINGS"].admin_token
    if bootstrap and digests_match(digest, token_digest(bootstrap)):
        return Principal(BOOTSTRAP_ADMIN_NAME, Role.ADMIN)
    principal = principal_for_digest(db_session(), digest)
    if principal is None:
        raise ApiError(
            401,
            "invalid or revoked token",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return principal


def requires(permission: Permission) -> Callable[[F], F]:
    """Decorate a view so it runs only for a principal holding ``permission`` (else 401/403)."""

    def decorator(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            principal = authenticate()
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
