"""The interface of the generic SQL that differs between PostgreSQL and SQLite: ``Backend`` and
the shapes its methods take. ``service.db.postgresql`` and ``service.db.sqlite`` implement it;
``service.db.backend.backend_of`` picks one for a connection. A capability whose own queries
differ by backend keeps them in its ``sql/`` package (``service.stream.sql``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection, Select, Table
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.orm import Session

Insert = PgInsert | SqliteInsert
#: A staging table's columns, ``(name, PostgreSQL type, SQLite type)``, and its rows.
Columns = Sequence[tuple[str, str, str]]
Rows = Iterable[Sequence[Any]]
#: A ``SELECT`` of any columns.
AnySelect = Select[*tuple[Any, ...]]


@dataclass(frozen=True)
class WritesRefused:
    """Why the database takes no writes now: the readiness ``check`` that found it
    (``"transaction"``: the database refuses a write transaction; ``"write_probe"``: the
    storage beside the database file refuses new bytes), the ``reason`` in words, and whether
    the storage is out of space (``disk_full``)."""

    check: str
    reason: str
    disk_full: bool = False


class Backend(Protocol):
    """What calmon asks of a database beyond portable SQL."""

    name: str

    def insert(self, table: Table) -> Insert:
        """An ``INSERT`` that supports ``ON CONFLICT`` (``on_conflict_do_nothing/update``)."""

    def for_update(self, statement: Select[Any]) -> Select[Any]:
        """``statement`` holding its rows until commit (a no-op where writes are serialised)."""

    def advisory_lock(self, session: Session, key: int) -> None:
        """Serialise with other transactions taking ``key`` until commit."""

    def analyze(self, session: Session, tables: Sequence[str]) -> None:
        """Refresh the planner's statistics of ``tables`` (a no-op without a planner to feed)."""

    def linear_joins(self, session: Session) -> AbstractContextManager[None]:
        """Within the block, the statements of ``session`` join by hashing or merging, whose
        cost grows with the sum of the two sides, never by a nested loop, whose cost grows
        with their product when an inner side has no index the join can probe."""

    def load_staging(
        self, session: Session, table: str, columns: Columns, rows: Rows, keys: Sequence[str]
    ) -> None:
        """Fill the per-connection temporary ``table`` with ``rows``, emptied first or at every
        commit; ``keys`` name the columns the statements on it join or filter on. A column of
        SQLite type ``TIMESTAMP`` takes aware datetimes."""

    def fetch_rows(self, session: Session, statement: AnySelect) -> list[tuple[Any, ...]]:
        """Every row of ``statement`` as a plain tuple: binary columns as ``bytes``, timestamps
        as aware datetimes, without a per-row ORM result object (for wide reads of many rows)."""

    def writes_refused(self, connection: Connection) -> WritesRefused | None:
        """Why the database takes no writes now (a standby, read-only sessions, a read-only
        file, a full disk), or None; run on a migrated database, leaves nothing written."""
