"""The request-scoped database session."""

from __future__ import annotations

from flask import Flask, current_app, g
from sqlalchemy.orm import Session

from service.db.database import Database


def database() -> Database:
    return current_app.extensions["calmon.database"]  # type: ignore[no-any-return]


def db_session() -> Session:
    """The session of the current request, opened on first use and closed at teardown."""
    if "db_session" not in g:
        g.db_session = database().sessions()
    return g.db_session  # type: ignore[no-any-return]


def init_session_handling(app: Flask) -> None:
    """Close (and roll back anything uncommitted in) the request's session at teardown."""

    @app.teardown_appcontext
    def _close_session(_exc: BaseException | None) -> None:
        session = g.pop("db_session", None)
        if session is not None:
            session.close()
