"""Liveness and readiness probes (open, no token)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.db.backend import backend_of
from service.db.database import Database
from service.db.failover import engine_durability_warnings
from service.db.maintenance import pending_tasks
from service.db.migrate import schema_is_current
from service.web.db_session import database
from service.web.http_errors import error_response
from service.web.operations import operation
from service.web.replies import Status, reply

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@operation(operation_id="healthz", reply=Status, reply_description="ok")
def healthz() -> Response:
    """Liveness.

    The process is up.
    """
    return reply(Status, {"status": "ok"})


@bp.get("/readyz")
@operation(
    operation_id="readyz",
    reply=Status,
    reply_description="ready",
    errors=(503,),
)
def readyz() -> Response:
    """Readiness: database reachable, schema at head.

    The database is reachable, its schema at the migrations' head, it takes writes (not a standby,
    not read-only), no maintenance pending; the ready reply lists ``warnings`` when an acknowledged
    write might not survive a failover (``service.db.failover``).
    """
    db = database()
    try:
        with db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        current = schema_is_current(db.engine)
        refused = _writes_refused(db) if current else None
        pending = current and refused is None and bool(_pending_maintenance(db))
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
    if refused is not None:
        return error_response(
            503,
            "database_read_only",
            refused,
            headers={"Retry-After": "5"},
        )
    if pending:
        return error_response(
            503,
            "maintenance_pending",
            "a migration left maintenance to do: run 'calmon migrate'",
            headers={"Retry-After": "30"},
        )
    ready: dict[str, Any] = {"status": "ready", "database": db.backend}
    warnings = engine_durability_warnings(db.engine)
    if warnings:
        ready["warnings"] = warnings
    return reply(Status, ready)


def _writes_refused(db: Database) -> str | None:
    """Why the database takes no writes now, or None (checked in a transaction rolled back)."""
    with db.engine.connect() as connection:
        return backend_of(connection).writes_refused(connection)


def _pending_maintenance(db: Database) -> list[str]:
    """The maintenance tasks still pending."""
    with db.session() as session:
        return pending_tasks(session)
