"""Daily range partitions of ``predictions`` on PostgreSQL, as the migrations build them.

Revision 0006 partitions ``predictions`` by UTC day and revision 0009's downgrade rebuilds that
layout; both create the partitions here. Partition ``predictions_pYYYYMMDD`` holds event times in
``[day 00:00 UTC, next day 00:00 UTC)`` and ``predictions_default`` catches any time no daily
partition covers. Installed with the migrations (``service.migrations.daily_partitions``), so it
imports nothing of calmon beyond SQLAlchemy.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Connection, text

PARENT = "predictions"
DEFAULT_PARTITION = "predictions_default"
#: Days of partitions made ready beyond today (UTC).
AHEAD_DAYS = 7


def partition_name(day: date) -> str:
    """The name of the partition of ``day``."""
    return f"predictions_p{day:%Y%m%d}"


def ensure_default_partition(connection: Connection) -> None:
    """Attach the default partition if it is missing."""
    connection.execute(
        text(f"CREATE TABLE IF NOT EXISTS {DEFAULT_PARTITION} PARTITION OF {PARENT} DEFAULT")
    )


def create_daily_partitions(connection: Connection, first: date, last: date) -> None:
    """Attach the default partition and one partition per day ``first`` .. ``last`` (inclusive)
    to the empty, partitioned ``predictions``."""
    ensure_default_partition(connection)
    day = first
    while day <= last:
        start = datetime.combine(day, time(), tzinfo=UTC)
        end = start + timedelta(days=1)
        connection.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF {PARENT}"
                f" FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )
        )
        day += timedelta(days=1)


def covering_days(first_ts: datetime | None, last_ts: datetime | None) -> tuple[date, date]:
    """The days to partition for rows from ``first_ts`` to ``last_ts`` (None: no rows): from the
    first row's day, or yesterday, through the last row's day, or ``AHEAD_DAYS`` after today."""
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    ahead = yesterday + timedelta(days=1 + AHEAD_DAYS)
    first = min(first_ts.astimezone(UTC).date(), yesterday) if first_ts else yesterday
    last = max(last_ts.astimezone(UTC).date(), ahead) if last_ts else ahead
    return first, last
