"""The request-scoped database session."""

from __future__ import annotations

import logging

from flask import Flask, current_app, g
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.db.database import Database
from service.db.errors import DRIVER_ERROR

log = logging.getLogger(__name__)


def database() -> Database:
    return current_app.extensions["calmon.database"]  # type: ignore[no-any-return]


def db_session() -> Session:
    """The session of the current request, opened on first use and closed at teardown."""
    if "db_session" not in g:
        g.db_session = database().sessions()
    return g.db_session  # type: ignore[no-any-return]


def init_session_handling(app: Flask) -> None:
    """Close (and roll back anything uncommitted in) the request's session at teardown.

    A connection lost during the request cannot be rolled back: its session is invalidated
    instead (the pool drops the connection; the database ends the transaction with it), and
    the reply the request already has stands, since an error raised here would replace it with
    the WSGI server's own page.
    """

    @app.teardown_appcontext
    def _close_session(_exc: BaseException | None) -> None:
        session = g.pop("db_session", None)
        if session is None:
            return
        try:
            session.close()
        except (SQLAlchemyError, DRIVER_ERROR) as exc:
            log.warning("database session lost at teardown: %s", type(exc).__name__)
            try:
                session.invalidate()
            except (SQLAlchemyError, DRIVER_ERROR):
                log.warning("database session could not be invalidated")
