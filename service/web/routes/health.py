"""Liveness and readiness probes (open, no token)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.db.backend import backend_of
from service.db.database import Database
from service.db.dialect import WritesRefused
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
    not read-only, not out of disk), no maintenance pending; a 503 names the failing check in its
    details (``field``); the ready reply lists ``warnings`` when an acknowledged write might not
    survive a failover (``service.db.failover``).
    """
    db = database()
    try:
        with db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        current = schema_is_current(db.engine)
        refused = _writes_refused(db) if current else None
        pending = current and refused is None and bool(_pending_maintenance(db))
    except SQLAlchemyError:
        return _unready(
            "database_unavailable", "connect", "the database is unreachable", retry_after=5
        )
    if not current:
        return _unready(
            "schema_outdated",
            "schema",
            "the database schema is not at head: run 'calmon migrate'",
            retry_after=30,
        )
    if refused is not None:
        code = "database_disk_full" if refused.disk_full else "database_read_only"
        return _unready(code, refused.check, refused.reason, retry_after=5)
    if pending:
        return _unready(
            "maintenance_pending",
            "maintenance",
            "a migration left maintenance to do: run 'calmon migrate'",
            retry_after=30,
        )
    ready: dict[str, Any] = {"status": "ready", "database": db.backend}
    warnings = engine_durability_warnings(db.engine)
    if warnings:
        ready["warnings"] = warnings
    return reply(Status, ready)


def _unready(code: str, check: str, message: str, *, retry_after: int) -> Response:
    """A 503 whose one detail names the readiness ``check`` that failed."""
    return error_response(
        503,
        code,
        message,
        [{"field": check, "message": message}],
        headers={"Retry-After": str(retry_after)},
    )


def _writes_refused(db: Database) -> WritesRefused | None:
    """Why the database takes no writes now, or None (checked in a transaction rolled back,
    and on SQLite by a probe file written and removed beside the database file)."""
    with db.engine.connect() as connection:
        return backend_of(connection).writes_refused(connection)


def _pending_maintenance(db: Database) -> list[str]:
    """The maintenance tasks still pending."""
    with db.session() as session:
        return pending_tasks(session)
