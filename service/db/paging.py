"""Reading a whole table in pages, without the session keeping the rows."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import RowMapping, Table, select
from sqlalchemy.orm import Session


def rows_by_seq(session: Session, table: Table, page: int) -> Iterator[RowMapping]:
    """Every row of ``table`` in the order of its ``seq`` column, ``page`` rows per query
    (keyset pagination: each query starts after the last ``seq`` seen)."""
    after = 0
    while True:
        rows = session.execute(
            select(table).where(table.c.seq > after).order_by(table.c.seq).limit(page)
        ).all()
        if not rows:
            return
        for row in rows:
            yield row._mapping
        after = rows[-1].seq
