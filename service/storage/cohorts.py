"""Cohort values admitted per model and key (the cap on distinct values)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.storage.models import CohortValue, ModelRecord, table_of


def admitted_values(session: Session, model: str, keys: Collection[str]) -> dict[str, set[str]]:
    """The values already admitted for each of ``keys``."""
    out: dict[str, set[str]] = {k: set() for k in keys}
    if not keys:
        return out
    rows = session.execute(
        select(CohortValue.key, CohortValue.value).where(
            CohortValue.model == model, CohortValue.key.in_(list(keys))
        )
    )
    for key, value in rows:
        out[key].add(value)
    return out


def admit_values(session: Session, model: str, values: Mapping[str, Sequence[str]]) -> None:
    """Record newly admitted values.

    On PostgreSQL the model's row is locked first, so two batches cannot both admit the last
    value under the cap; SQLite transactions are serialised already.
    """
    if not any(values.values()):
        return
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        session.execute(select(ModelRecord.name).where(ModelRecord.name == model).with_for_update())
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(
        table_of(CohortValue)
    )
    session.execute(
        insert.on_conflict_do_nothing(),
        [{"model": model, "key": k, "value": v} for k, vs in values.items() for v in vs],
    )
