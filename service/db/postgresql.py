"""The PostgreSQL side of ``service.db.backend``: binary COPY staging, advisory locks, planner
statistics and settings, and the binary ``COPY`` and binary fetches other modules run on the
psycopg connection under a session (``copy_binary``, ``binary_rows``).

What psycopg raises on the statements it runs directly (the ``COPY`` and the binary fetches)
leaves this module as SQLAlchemy's error for it, the connection invalidated when it was lost
(``_driver_errors``), like every other statement's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Select, Table, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from service.db.dialect import AnySelect, Columns, Rows, WritesRefused
from service.db.driver import Error as DriverError

if TYPE_CHECKING:
    import psycopg

#: What a staging table's column of each type is declared with beyond its type.
_STAGED_STORAGE = {"text": ' COLLATE "C"', "bytea": " COMPRESSION lz4"}


def _psycopg(session: Session) -> psycopg.Connection[Any]:
    """The psycopg connection under ``session``, in the session's transaction."""
    return cast("psycopg.Connection[Any]", session.connection().connection.dbapi_connection)


@contextmanager
def _driver_errors(session: Session, statement: str) -> Iterator[None]:
    """Raise what psycopg raises within the block as SQLAlchemy would have: its ``DBAPIError``
    subclass (``OperationalError`` for a lost connection, ``IntegrityError`` for a broken key),
    the session's connection invalidated first when psycopg lost it, so that nothing tries to
    roll it back and the pool opens a new one."""
    try:
        yield
    except DriverError as exc:
        connection = session.connection()
        driver = _psycopg(session)
        lost = driver.closed or driver.broken
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement,
            None,
            exc,
            DriverError,
            connection_invalidated=lost,
            dialect=connection.dialect,
        ) from exc


def binary_rows(session: Session, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (``%(name)s`` parameters) fetched in binary, in the session's
    transaction: a ``bytea`` arrives as bytes rather than hex text, an array as a list."""
    with _driver_errors(session, sql), _psycopg(session).cursor(binary=True) as cursor:
        cursor.execute(sql, dict(params))
        return cursor.fetchall()


def copy_binary(session: Session, copy_sql: str, data: bytes) -> None:
    """Run ``copy_sql`` (a ``COPY ... FROM STDIN (FORMAT BINARY)``) on ``data``, a whole
    payload (``service.db.binary_copy.payload``), in the session's transaction."""
    with (
        _driver_errors(session, copy_sql),
        _psycopg(session).cursor() as cursor,
        cursor.copy(copy_sql) as copy,
    ):
        copy.write(data)


class PostgreSQL:
    """The production backend (psycopg 3)."""

    name = "postgresql"

    def insert(self, table: Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def for_update(self, statement: Select[Any]) -> Select[Any]:
        return statement.with_for_update()

    def advisory_lock(self, session: Session, key: int) -> None:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def analyze(self, session: Session, tables: Sequence[str]) -> None:
        for table in tables:
            session.execute(text(f"ANALYZE {table}"))

    @contextmanager
    def linear_joins(self, session: Session) -> Iterator[None]:
        """``enable_nestloop`` off for the block, then back to what it was (``SET LOCAL``: an
        error inside the block ends the transaction and the setting with it)."""
        before = session.execute(text("SHOW enable_nestloop")).scalar_one()
        session.execute(text("SET LOCAL enable_nestloop = off"))
        yield
        session.execute(
            text("SELECT set_config('enable_nestloop', :before, true)"), {"before": before}
        )

    def load_staging(
        self, session: Session, table: str, columns: Columns, rows: Rows, keys: Sequence[str]
    ) -> None:
        """Binary ``COPY`` into a temporary table emptied at every commit, then ``ANALYZE`` its
        ``keys`` so the planner joins it to the big tables through their primary-key indexes.

        Text columns compare byte by byte (``COLLATE "C"``, as the hot tables' keys do): the
        sort behind ``ANALYZE`` then costs half as much as under the database's locale. Binary
        columns are compressed with ``lz4`` (bucket statistics of a few KB each would otherwise
        pass through ``pglz``, several times slower, on every load; the bucket table keeps the
        ``lz4`` datum as it is)."""
        ddl = ", ".join(f"{name} {pg}{_STAGED_STORAGE.get(pg, '')}" for name, pg, _ in columns)
        session.execute(
            text(f"CREATE TEMP TABLE IF NOT EXISTS {table} ({ddl}) ON COMMIT DELETE ROWS")
        )
        names = ", ".join(name for name, _, _ in columns)
        copy_sql = f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)"
        with (
            _driver_errors(session, copy_sql),
            _psycopg(session).cursor() as cursor,
            cursor.copy(copy_sql) as copy,
        ):
            copy.set_types([pg for _, pg, _ in columns])
            for row in rows:
                copy.write_row(row)
        session.execute(text(f"ANALYZE {table} ({', '.join(keys)})"))

    def fetch_rows(self, session: Session, statement: AnySelect) -> list[tuple[Any, ...]]:
        """Fetched in binary: a ``bytea`` arrives as bytes rather than hex text to decode, a
        number or timestamp in its wire form; timestamps in the connection's time zone."""
        compiled = statement.compile(dialect=session.get_bind().dialect)
        return binary_rows(session, str(compiled), compiled.params)

    def writes_refused(self, connection: Connection) -> WritesRefused | None:
        """A standby in recovery, or sessions read-only by default (``ALTER DATABASE ... SET
        default_transaction_read_only``, or the server's setting). The server's disk is the
        server's: a full one fails writes with ``database_unavailable``."""
        in_recovery, read_only = connection.execute(
            text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        ).one()
        if in_recovery:
            return WritesRefused(
                "transaction", "the database is a standby in recovery: it takes no writes"
            )
        if read_only == "on":
            return WritesRefused(
                "transaction",
                "the database's transactions are read-only (default_transaction_read_only)",
            )
        return None


POSTGRESQL = PostgreSQL()
