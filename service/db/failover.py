"""PostgreSQL behind a failover pair: connecting to whichever node takes writes, discarding a
connection that lost its server or found itself on a read-only node, bounding a commit that
waits for a synchronous standby, and saying when the settings cannot keep an acknowledged write
on the standby.

A URL may name several hosts, in the form SQLAlchemy takes
(``postgresql+psycopg://user@/calmon?host=h1:5432&host=h2:5432&target_session_attrs=read-write``)
or the libpq form ``pg_autoctl show uri`` prints (``postgres://h1:5432,h2:5432/calmon?...``,
turned into the first by ``service.db.database``): libpq tries them in order and keeps the first
that takes writes.

A commit is bounded by ``commit_seconds``: past it calmon cancels the commit's wait. PostgreSQL
then ends the wait with a warning and keeps the transaction committed on the primary alone, so
calmon cannot tell whether the write will survive a failover: the connection is discarded and
the request answered 503 (``CommitOutcomeUnknown``), and the client's retry, idempotent, stores
it once either way.

Just before each commit calmon sets the server's ``synchronous_commit`` for the transaction and
writes a WAL record of its own (``DURABLE_COMMIT``): every commit calmon acknowledges waits for
the standby, also one that changed nothing and reports what an earlier commit stored (a
duplicate batch, a replayed ``Idempotency-Key``), which PostgreSQL shows other sessions as soon
as it is on the primary, before the standby has it. A connection's own ``synchronous_commit``
is ``local``, so the transaction PostgreSQL runs when a backend exits (dropping the connection's
temporary staging tables) does not wait: on a primary cut off from its standby such a backend
would never exit, and the primary could be neither shut down nor rejoin as a standby.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.engine import URL, ExceptionContext
from sqlalchemy.exc import SQLAlchemyError

from service.db import driver

log = logging.getLogger(__name__)

#: libpq connection parameters calmon sets unless the URL sets them: a host that does not
#: answer is given up after ``connect_timeout`` seconds (libpq then tries the next host), and a
#: server that stops answering on an open connection is noticed within ``tcp_user_timeout``
#: milliseconds of unacknowledged data or about 11 s of silence (keepalives).
CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 3,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
#: Seconds calmon waits for a COMMIT before it cancels it and answers 503
#: (``CALMON_COMMIT_SECONDS``).
DEFAULT_COMMIT_SECONDS = 10.0
#: SQLSTATE of a write refused by a read-only transaction (a standby, or a node being promoted).
READ_ONLY_SQLSTATE = "25006"
#: ``synchronous_commit`` values with which a commit returns before a standby has its WAL.
_NOT_ON_STANDBY = frozenset({"off", "local"})
#: Where a connection keeps the server's ``synchronous_commit`` (its pool record's ``info``).
_SYNCHRONOUS_COMMIT = "calmon_synchronous_commit"
#: Run just before each COMMIT: the server's ``synchronous_commit`` for this transaction, and a
#: WAL record of its own (a transactional logical message, which any role may write), so that
#: the commit waits for the standby even when the transaction changed nothing (a retried batch
#: whose rows are all stored, a replayed ``Idempotency-Key``). Its confirmation covers every
#: commit before it, which the reply may report.
DURABLE_COMMIT = (
    "SELECT set_config('synchronous_commit', %(level)s, true), "
    "pg_logical_emit_message(true, 'calmon', '')"
)


class CommitOutcomeUnknown(driver.OperationalError):
    """The commit could not be confirmed (its wait was cancelled, or the server could not take
    the commit's WAL record): the transaction may or may not survive a failover, and the
    request is answered 503 so that the client retries it."""


def hosts_of(url: URL) -> int:
    """How many hosts ``url`` names (a ``host`` query parameter may be given more than once)."""
    query_hosts = url.query.get("host")
    if isinstance(query_hosts, tuple):
        return len(query_hosts)
    return 1


def connect_args(url: URL) -> dict[str, Any]:
    """``CONNECT_DEFAULTS`` less the parameters ``url`` sets itself."""
    return {k: v for k, v in CONNECT_DEFAULTS.items() if k not in url.query}


def configure_failover(engine: Engine, commit_seconds: float) -> None:
    """Bound every commit by ``commit_seconds`` and discard a connection that found itself on a
    read-only node (the pool's other connections, to the same node, go with it)."""
    original = engine.dialect.do_commit

    def do_commit(dbapi_connection: Any) -> None:
        level = dbapi_connection.info.get(_SYNCHRONOUS_COMMIT)
        if level is not None and level not in _NOT_ON_STANDBY:
            try:
                with dbapi_connection.cursor() as cursor:
                    cursor.execute(DURABLE_COMMIT, {"level": level})
            except driver.Error as exc:
                # A hot standby refuses the WAL record; a lost server fails it: either way the
                # commit cannot be confirmed now.
                raise CommitOutcomeUnknown(
                    f"the server cannot confirm a commit now ({type(exc).__name__})"
                ) from exc
        bounded_commit(dbapi_connection, original, commit_seconds)

    engine.dialect.do_commit = do_commit  # type: ignore[method-assign]

    @event.listens_for(engine, "connect")
    def _local_outside_commits(dbapi_connection: Any, record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('synchronous_commit')")
            row = cursor.fetchone()
            level = str(row[0]) if row else "on"
            if level not in _NOT_ON_STANDBY:
                cursor.execute("SET synchronous_commit = local")
        dbapi_connection.commit()
        record.info[_SYNCHRONOUS_COMMIT] = level

    @event.listens_for(engine, "handle_error")
    def _discard_read_only(context: ExceptionContext) -> None:
        sqlstate = getattr(context.original_exception, "sqlstate", None)
        if sqlstate == READ_ONLY_SQLSTATE or isinstance(
            context.original_exception, CommitOutcomeUnknown
        ):
            context.is_disconnect = True


def bounded_commit(dbapi_connection: Any, commit: Any, seconds: float) -> None:
    """Run ``commit(dbapi_connection)``, cancelling it after ``seconds``; raise
    ``CommitOutcomeUnknown`` when the cancel was sent (the engine's error hook then discards
    the connection). ``dbapi_connection`` is the pool's proxy of the driver's connection."""
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        try:
            dbapi_connection.cancel_safe(timeout=2)
        except Exception:
            log.warning("could not cancel a commit past %s s", seconds)

    timer = threading.Timer(seconds, cancel)
    timer.daemon = True
    timer.start()
    try:
        commit(dbapi_connection)
    finally:
        timer.cancel()
    if cancelled.is_set():
        log.warning("commit not confirmed within %s s: outcome unknown", seconds)
        raise CommitOutcomeUnknown(
            f"the commit was not confirmed within {seconds} s (a synchronous standby did not "
            "answer); it may have been kept on the primary alone"
        )


def durability_warnings(connection: Connection, url: URL) -> list[str]:
    """Why a write calmon acknowledges might not be on a standby, or be lost in a failover;
    empty when the settings hold (or when ``url`` names one host and the server has no
    synchronous standby configured: a single server, no failover promised)."""
    setting = connection.execute(
        text(
            "SELECT current_setting('synchronous_commit'), "
            "current_setting('synchronous_standby_names')"
        )
    ).one()
    server_level = connection.connection.info.get(_SYNCHRONOUS_COMMIT, setting[0])
    synchronous_commit, standby_names = str(server_level), str(setting[1]).strip()
    several = hosts_of(url) > 1
    warnings = []
    if (several or standby_names) and synchronous_commit in _NOT_ON_STANDBY:
        warnings.append(
            f"synchronous_commit is {synchronous_commit}: a write is acknowledged before a "
            "standby has it, and a failover can lose it"
        )
    if several and not standby_names:
        warnings.append(
            "the primary has no synchronous standby (synchronous_standby_names is empty): "
            "acknowledged writes are on the primary alone until a standby is back"
        )
    attrs = url.query.get("target_session_attrs")
    if several and attrs not in ("read-write", "primary"):
        warnings.append(
            "the database URL names several hosts without target_session_attrs=read-write: "
            "calmon may connect to a standby"
        )
    return warnings


def engine_durability_warnings(engine: Engine) -> list[str]:
    """``durability_warnings`` on a connection of ``engine`` (none on SQLite, nor while the
    database cannot be reached: readiness reports that)."""
    if engine.dialect.name != "postgresql":
        return []
    try:
        with engine.connect() as connection:
            return durability_warnings(connection, engine.url)
    except SQLAlchemyError:
        return []


def log_durability(engine: Engine) -> list[str]:
    """Log each durability warning of ``engine`` (at start); the warnings."""
    warnings = engine_durability_warnings(engine)
    for warning in warnings:
        log.warning("durability: %s", warning)
    return warnings
