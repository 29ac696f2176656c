"""Bearer authentication, review-page session cookies and per-route permissions."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from flask import current_app, g, request

from service.auth import service as auth_service
from service.auth.tokens import Permission, Principal
from service.web.db_session import database, db_session
from service.web.http_errors import ApiError

F = TypeVar("F", bound=Callable[..., Any])


#: The review page's sign-in cookie (HttpOnly, Secure, SameSite=Strict): a session id, never a
#: token; the server keeps only its SHA-256 (``ui_sessions``).
SESSION_COOKIE = "calmon_session"
#: The cookie of sign-ins before sessions existed (it held the token): cleared, never read.
LEGACY_TOKEN_COOKIE = "calmon_token"
#: The longest session id the cookie may hold (ids are 43 characters).
_MAX_SESSION_ID = 128


def _bootstrap_token() -> str | None:
    token = current_app.config["CALMON_SETTINGS"].admin_token
    return str(token) if token else None


def resolve_token(token: str) -> Principal | None:
    """The principal a token stands for, if any (bootstrap admin or a stored, live token).

    Read in a read session of its own, ended before the view runs: on SQLite it neither takes
    nor waits for the write lock, so a request holds no transaction while its body is parsed
    and validated, and begins its write transaction only when it writes."""
    with database().read_session() as session:
        return auth_service.resolve_token(session, token, bootstrap_token=_bootstrap_token())


def open_session(token: str) -> tuple[str, Principal] | None:
    """Sign in with ``token``: a new session id for the cookie, or None if the token may not
    read."""
    return auth_service.open_ui_session(db_session(), token, bootstrap_token=_bootstrap_token())


def close_session() -> None:
    """Sign out: delete the session the request's cookie names, if any."""
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if session_id and len(session_id) <= _MAX_SESSION_ID:
        auth_service.close_ui_session(db_session(), session_id)


def _session_principal() -> Principal | None:
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if not session_id or len(session_id) > _MAX_SESSION_ID:
        return None
    with database().read_session() as session:
        return auth_service.ui_session_principal(
            session, session_id, bootstrap_token=_bootstrap_token()
        )


def _unauthorized(message: str, challenge: str) -> ApiError:
    return ApiError(401, message, headers={"WWW-Authenticate": challenge})


def authenticate(allow_cookie: bool = False) -> Principal:
    """Resolve the request's bearer token (or, for read-only views, the review page's session
    cookie) to a principal, or raise 401."""
    header = request.headers.get("Authorization", "")
    if not header and allow_cookie and request.cookies.get(SESSION_COOKIE):
        principal = _session_principal()
        if principal is None:
            raise _unauthorized(
                "the sign-in expired or was ended: sign in again",
                'Bearer error="invalid_token"',
            )
        return principal
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>'", 'Bearer realm="calmon"'
        )
    principal = resolve_token(token.strip())
    if principal is None:
        raise _unauthorized("invalid or revoked token", 'Bearer error="invalid_token"')
    return principal


def requires(permission: Permission, *, allow_cookie: bool = False) -> Callable[[F], F]:
    """Decorate a view so it runs only for a principal holding ``permission`` (else 401/403).

    ``allow_cookie`` also accepts the review page's session cookie (read-only views only).
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
