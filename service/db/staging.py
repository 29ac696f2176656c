"""Bulk loading of a batch into a per-connection temporary staging table.

PostgreSQL loads with binary ``COPY`` (the fast path the ingest targets rely on); SQLite with
``executemany``. Staging tables are created once per connection and emptied at every commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine

from service.db.types import UTCDateTime

#: name -> (PostgreSQL column types, SQLite column types), in load order.
STAGING_TABLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "stage_predictions": (
        ("id", "text", "TEXT"),
        ("ts", "timestamptz", "TIMESTAMP"),
        ("cohort", "text", "TEXT"),
        ("slices", "text", "TEXT"),
        ("inputs", "bytea", "BLOB"),
        ("digest", "bytea", "BLOB"),
    ),
    "stage_labels": (
        ("id", "text", "TEXT"),
        ("label", "int2", "INTEGER"),
        ("ts", "timestamptz", "TIMESTAMP"),
    ),
}

_BIND_TYPES: dict[str, TypeEngine[Any]] = {"ts": UTCDateTime()}


def _create(session: Session, table: str) -> None:
    columns = STAGING_TABLES[table]
    if session.get_bind().dialect.name == "postgresql":
        ddl = ", ".join(f"{name} {pg}" for name, pg, _ in columns)
        session.execute(
            text(f"CREATE TEMP TABLE IF NOT EXISTS {table} ({ddl}) ON COMMIT DELETE ROWS")
        )
    else:
        ddl = ", ".join(f"{name} {lite}" for name, _, lite in columns)
        session.execute(text(f"CREATE TEMP TABLE IF NOT EXISTS {table} ({ddl})"))
        session.execute(text(f"DELETE FROM {table}"))


def load(session: Session, table: str, rows: Iterable[Sequence[Any]]) -> None:
    """Fill the staging ``table`` with ``rows`` (tuples in the table's column order).

    On PostgreSQL the table is ANALYZEd after loading so the planner joins it to the big tables
    through their primary-key index instead of scanning them.
    """
    _create(session, table)
    names = [name for name, _, _ in STAGING_TABLES[table]]
    if session.get_bind().dialect.name == "postgresql":
        dbapi = session.connection().connection.dbapi_connection
        assert dbapi is not None
        copy_sql = f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)"
        with dbapi.cursor() as cursor, cursor.copy(copy_sql) as copy:  # type: ignore[attr-defined]
            copy.set_types([pg for _, pg, _ in STAGING_TABLES[table]])
            for row in rows:
                copy.write_row(row)
        session.execute(text(f"ANALYZE {table}"))
        return
    statement = text(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"
    ).bindparams(*(bindparam(n, type_=_BIND_TYPES[n]) for n in names if n in _BIND_TYPES))
    params = [dict(zip(names, row, strict=True)) for row in rows]
    if params:
        session.execute(statement, params)
