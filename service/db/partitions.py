"""Daily range partitions of ``predictions`` on PostgreSQL (SQLite keeps one table).

Partition ``predictions_pYYYYMMDD`` holds event times in ``[day 00:00 UTC, next day 00:00 UTC)``;
``predictions_default`` catches any time no daily partition covers (a late or far-future
prediction is stored, never refused). Partitions are created ahead of time by the refresher and
by ``calmon partitions``; creating one whose range already has rows in the default partition
moves those rows into it. Maintenance holds a transaction-level advisory lock, so the refresher
and an operator's command never race.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Connection, text

from service.db.backend import backend_of

PARENT = "predictions"
DEFAULT_PARTITION = "predictions_default"
#: Days of partitions kept ready beyond today (UTC).
AHEAD_DAYS = 7
_NAME = re.compile(r"^predictions_p(\d{8})$")
#: Arbitrary, fixed key of the advisory lock that serialises partition maintenance.
_LOCK_KEY = 0x63616C6D6F6E01


@dataclass(frozen=True)
class Partition:
    """A daily partition: rows with ``start <= ts < end`` (UTC)."""

    name: str
    day: date

    @property
    def start(self) -> datetime:
        return datetime.combine(self.day, time(), tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=1)


def partition_for(day: date) -> Partition:
    return Partition(f"predictions_p{day:%Y%m%d}", day)


def is_partition_table(name: str) -> bool:
    """Whether ``name`` is one of the partitions (not in the models, so Alembic ignores it)."""
    return name == DEFAULT_PARTITION or _NAME.match(name) is not None


def is_partitioned(connection: Connection) -> bool:
    """Whether ``predictions`` is a partitioned table here (PostgreSQL only)."""
    if backend_of(connection).name != "postgresql":
        return False
    kind = connection.scalar(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:parent)"), {"parent": PARENT}
    )
    return bool(kind == "p")


def _days(first: date, last: date) -> Iterator[date]:
    day = first
    while day <= last:
        yield day
        day += timedelta(days=1)


def list_partitions(connection: Connection) -> list[Partition]:
    """The daily partitions attached to ``predictions``, oldest first (empty when unpartitioned)."""
    if not is_partitioned(connection):
        return []
    names = connection.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = CAST(:parent AS regclass)"
        ),
        {"parent": PARENT},
    )
    found = []
    for name in names:
        match = _NAME.match(name)
        if match:
            found.append(Partition(name, datetime.strptime(match[1], "%Y%m%d").date()))
    return sorted(found, key=lambda p: p.day)


def _lock(connection: Connection) -> None:
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})


def ensure_default_partition(connection: Connection) -> None:
    """Attach the default partition if it is missing."""
    connection.execute(
        text(f"CREATE TABLE IF NOT EXISTS {DEFAULT_PARTITION} PARTITION OF {PARENT} DEFAULT")
    )


def ensure_partitions(connection: Connection, first: date, last: date) -> list[Partition]:
    """Create the missing daily partitions for ``first`` .. ``last`` (inclusive); return them.

    Each is created as a plain table, filled with the rows of its range that sit in the default
    partition, and attached: ``ATTACH PARTITION`` locks ``predictions`` less than
    ``CREATE TABLE ... PARTITION OF`` would, so ingest is not stalled. Runs in the caller's
    transaction; a no-op where ``predictions`` is not partitioned.
    """
    if not is_partitioned(connection):
        return []
    _lock(connection)
    ensure_default_partition(connection)
    existing = {p.day for p in list_partitions(connection)}
    created = []
    for day in _days(first, last):
        if day in existing:
            continue
        part = partition_for(day)
        bounds = {"start": part.start, "end": part.end}
        connection.execute(
            text(
                f"CREATE TABLE {part.name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
        )
        connection.execute(
            text(
                f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE ts >= :start AND ts < :end"
                f" RETURNING *) INSERT INTO {part.name} SELECT * FROM moved"
            ),
            bounds,
        )
        connection.execute(
            text(
                f"ALTER TABLE {PARENT} ATTACH PARTITION {part.name} FOR VALUES"
                f" FROM ('{part.start.isoformat()}') TO ('{part.end.isoformat()}')"
            )
        )
        created.append(part)
    return created


def ensure_ahead(
    connection: Connection, now: datetime, ahead_days: int = AHEAD_DAYS
) -> list[Partition]:
    """Partitions for yesterday through ``ahead_days`` after today (UTC)."""
    today = now.astimezone(UTC).date()
    return ensure_partitions(
        connection, today - timedelta(days=1), today + timedelta(days=ahead_days)
    )


def drop_partitions_before(connection: Connection, cutoff: datetime) -> list[tuple[Partition, int]]:
    """Drop every daily partition that ends at or before ``cutoff``; return each with its rows."""
    if not is_partitioned(connection):
        return []
    _lock(connection)
    dropped = []
    for part in list_partitions(connection):
        if part.end > cutoff:
            continue
        rows = connection.scalar(text(f"SELECT count(*) FROM {part.name}"))
        connection.execute(text(f"DROP TABLE {part.name}"))
        dropped.append((part, int(rows or 0)))
    return dropped
