"""Engines and sessions. Callers own the session's lifetime; storage functions never commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service.db import driver
from service.db.backend import backend_of
from service.db.failover import DEFAULT_COMMIT_SECONDS, configure_failover, connect_args
from service.db.types import lenient_json_loads

SQLITE_BUSY_TIMEOUT_SECONDS = 30
#: The execution option that marks a read session's connections (``Database.read_session``).
READ_ONLY = "calmon_read_only"


def _normalise_url(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs, and turn the hosts of a libpq multi-host
    URI (``postgres://h1:5432,h2:5432/db``, as ``pg_autoctl show uri`` prints it) into the
    ``host`` query parameters SQLAlchemy takes."""
    parsed = make_url(_libpq_hosts_as_query(url))
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _libpq_hosts_as_query(url: str) -> str:
    """``scheme://user@h1:p1,h2:p2/db?q`` as ``scheme://user@/db?host=h1:p1&host=h2:p2&q``; any
    other URL as it is."""
    scheme, sep, rest = url.partition("://")
    authority, _, tail = rest.partition("/")
    userinfo, at, hostlist = authority.rpartition("@")
    if not sep or "," not in hostlist:
        return url
    path, _, query = tail.partition("?")
    hosts = "&".join(f"host={h}" for h in hostlist.split(","))
    return f"{scheme}://{userinfo}{at}/{path}?{hosts}{'&' + query if query else ''}"


def _configure_sqlite(engine: Engine) -> None:
    """WAL, foreign keys and write-intent transactions for the embedded SQLite default.

    ``BEGIN IMMEDIATE`` takes the write lock up front, so two writers queue on the busy timeout
    instead of failing when a read transaction tries to upgrade (SQLAlchemy's pysqlite recipe).
    A read session (``Database.read_session``) begins a deferred transaction instead: a snapshot
    that neither takes nor waits for the write lock.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


def _configure_postgresql(engine: Engine) -> None:
    """Turn off PostgreSQL's JIT compilation on every connection (``jit = off``).

    calmon's statements each take milliseconds, but the planner's cost estimates for a batch's
    staged joins can cross ``jit_above_cost`` and the inlining and optimisation thresholds: a
    label join of 10,000 labels then ran in 262 ms with JIT and in 78 ms without. A
    transaction-mode pooler that drops session settings needs ``ALTER ROLE ... SET jit = off``
    instead (docs/operations.md).
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET jit = off")
        dbapi_connection.commit()


def make_engine(
    url: str, *, commit_seconds: float = DEFAULT_COMMIT_SECONDS, **kwargs: Any
) -> Engine:
    """Create an engine for ``url`` (SQLite file or PostgreSQL), creating a SQLite file's folder.

    On PostgreSQL a commit is bounded by ``commit_seconds`` and a connection is discarded when
    its server is lost or takes no writes (``service.db.failover``); ``MissingDriver`` when
    psycopg, the ``postgresql`` extra, is not installed."""
    url = _normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        # A "file:" URI (with uri=true, say mode=ro) names a file that must exist already.
        if parsed.database and parsed.database != ":memory:" and not parsed.query.get("uri"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("json_deserializer", lenient_json_loads)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}, **kwargs)
        _configure_sqlite(engine)
        return engine
    if not driver.INSTALLED:
        raise MissingDriver(driver.MISSING)
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 5)
    kwargs.setdefault("max_overflow", 10)
    kwargs["connect_args"] = {**connect_args(parsed), **kwargs.get("connect_args", {})}
    engine = create_engine(url, **kwargs)
    _configure_postgresql(engine)
    configure_failover(engine, commit_seconds)
    return engine


class MissingDriver(ValueError):
    """The database URL names PostgreSQL and psycopg, its driver, is not installed."""


class Database:
    """An engine and its session factory."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        self.engine = make_engine(url, **engine_kwargs)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.read_sessions = sessionmaker(
            self.engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False
        )

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session for background work; rolled back unless the caller committed."""
        with self.sessions() as session:
            try:
                yield session
            finally:
                session.rollback()

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reading only, always rolled back. On SQLite its transaction neither
        takes nor waits for the write lock, so a long read (the refresher computing readings, a
        scrape) never holds up a writer; on PostgreSQL it is an ordinary session."""
        with self.read_sessions() as session:
            try:
                yield session
            finally:
                session.rollback()

    def dispose(self) -> None:
        self.engine.dispose()


def refresh_planner_statistics(session: Session, tables: tuple[str, ...]) -> None:
    """ANALYZE the big tables on PostgreSQL (a no-op on SQLite); the caller commits.

    The stream's queries rely on the planner knowing how large ``predictions`` and ``labels``
    are; autovacuum normally keeps that current, but it can be switched off (it is on some test
    machines), and a fresh table is never analyzed before its first autovacuum round.
    """
    backend_of(session).analyze(session, tables)
