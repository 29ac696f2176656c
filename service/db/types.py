"""Column types shared by the models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

#: 64-bit keys on PostgreSQL; SQLite only auto-increments a column declared INTEGER.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def byte_order_key(length: int) -> String:
    """A ``VARCHAR(length)`` key compared byte by byte on both backends.

    PostgreSQL columns take the database's collation unless told otherwise, and every index
    probe, sort and join on them then goes through the locale's ``strcoll``. The hot tables'
    keys are only ever compared for equality and walked in order, so they use ``COLLATE "C"``:
    UTF-8 byte order, which is code point order (Python's ``sorted``) and SQLite's ``BINARY``.
    """
    return String(length).with_variant(String(length, collation="C"), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores ``timestamptz``; SQLite stores naive UTC text, re-tagged as UTC on read.
    Naive datetimes are refused on write so a local time can never slip in.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: calmon stores timezone-aware UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


@dataclass(frozen=True)
class UnparsableJson:
    """What a JSON column holding text that is not JSON reads as (SQLite stores JSON as text,
    so a row written around the service can hold anything; PostgreSQL's ``json`` refuses it):
    the readers of such rows tell the row apart instead of failing the whole result."""

    text: str


def lenient_json_loads(text: str) -> Any:
    """``json.loads``, or an ``UnparsableJson`` holding ``text`` if it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return UnparsableJson(text)
