"""The SQLite side of ``service.db.backend``: the embedded default.

SQLite serialises writers (``BEGIN IMMEDIATE``, ``service.db.database``), so locks are no-ops,
and it keeps no planner statistics worth refreshing.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Select, Table, bindparam, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.db.dialect import AnySelect, Columns, Rows, WritesRefused
from service.db.types import UTCDateTime


class SQLite:
    """The embedded backend."""

    name = "sqlite"

    def insert(self, table: Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def for_update(self, statement: Select[Any]) -> Select[Any]:
        return statement

    def advisory_lock(self, session: Session, key: int) -> None:
        return None

    def analyze(self, session: Session, tables: Sequence[str]) -> None:
        return None

    @contextmanager
    def linear_joins(self, session: Session) -> Iterator[None]:
        """A no-op: SQLite answers ``id IN (SELECT ...)`` by probing the primary key once per
        row of the subquery (``EXPLAIN QUERY PLAN``: ``SEARCH ... (model=? AND id=?)``)."""
        yield

    def fetch_rows(self, session: Session, statement: AnySelect) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in session.execute(statement)]

    def load_staging(
        self, session: Session, table: str, columns: Columns, rows: Rows, keys: Sequence[str]
    ) -> None:
        ddl = ", ".join(f"{name} {lite}" for name, _, lite in columns)
        session.execute(text(f"CREATE TEMP TABLE IF NOT EXISTS {table} ({ddl})"))
        session.execute(text(f"DELETE FROM {table}"))
        names = [name for name, _, _ in columns]
        times = [name for name, _, lite in columns if lite == "TIMESTAMP"]
        statement = text(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"
        ).bindparams(*(bindparam(name, type_=UTCDateTime()) for name in times))
        params = [dict(zip(names, row, strict=True)) for row in rows]
        if params:
            session.execute(statement, params)

    def writes_refused(self, connection: Connection) -> WritesRefused | None:
        """Two probes. An update that matches no row still needs a writable file (SQLite opens
        a file it may not write read-only, and ``mode=ro`` does so on purpose); the caller's
        transaction is rolled back, so nothing is written. That update changes no page, so a
        full disk lets it through: a file of ``WRITE_PROBE_BYTES`` is then written, synced and
        removed beside the database file (``write_probe``), which a full or read-only file
        system refuses. An in-memory database has no file to probe."""
        try:
            connection.execute(text("UPDATE alembic_version SET version_num = version_num WHERE 0"))
        except OperationalError as exc:
            return WritesRefused(
                "transaction",
                f"the database file takes no writes ({type(exc.orig).__name__}: {exc.orig})",
            )
        path = _database_file(connection)
        return _write_probe(os.path.dirname(path)) if path else None


#: Bytes the write probe writes: one page of SQLite's default size, the least a write adds.
WRITE_PROBE_BYTES = 4096
#: ``errno`` values meaning the storage is out of space (or over the user's quota).
_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def _database_file(connection: Connection) -> str:
    """The path of the connection's main database file, or ``""`` for an in-memory one."""
    for _seq, name, path in connection.exec_driver_sql("PRAGMA database_list"):
        if name == "main":
            return str(path or "")
    return ""


def _write_probe(directory: str) -> WritesRefused | None:
    """Why ``directory`` takes no new bytes (writing, syncing and removing a file of
    ``WRITE_PROBE_BYTES`` fails), or None."""
    try:
        handle, name = tempfile.mkstemp(prefix=".calmon-write-probe-", dir=directory or ".")
        try:
            written = os.write(handle, bytes(WRITE_PROBE_BYTES))
            if written < WRITE_PROBE_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(handle)
        finally:
            os.close(handle)
            os.unlink(name)
    except OSError as exc:
        return WritesRefused(
            "write_probe",
            f"the database's directory takes no new data ({exc.strerror or exc})",
            disk_full=exc.errno in _OUT_OF_SPACE,
        )
    return None


SQLITE = SQLite()
