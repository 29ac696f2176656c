"""Liveness and readiness probes (open, no token)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.db.database import Database
from service.db.maintenance import pending_tasks
from service.db.migrate import schema_is_current
from service.web.db_session import database
from service.web.http_errors import error_response

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """The process is up."""
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """The database is reachable, its schema at the migrations' head, no maintenance pending."""
    db = database()
    try:
        with db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        current = schema_is_current(db.engine)
        pending = current and bool(_pending_maintenance(db))
    except SQLAlchemyError:
        return error_response(
            503,
            "database_unavailable",
            "the database is unreachable",
            headers={"Retry-After": "5"},
        )
    if not current:
        return error_response(
            503,
            "schema_outdated",
            "the database schema is not at head: run 'calmon migrate'",
            headers={"Retry-After": "30"},
        )
    if pending:
        return error_response(
            503,
            "maintenance_pending",
            "a migration left maintenance to do: run 'calmon migrate'",
            headers={"Retry-After": "30"},
        )
    return jsonify({"status": "ready", "database": db.backend})


def _pending_maintenance(db: Database) -> list[str]:
    """The maintenance tasks still pending."""
    with db.session() as session:
        return pending_tasks(session)
