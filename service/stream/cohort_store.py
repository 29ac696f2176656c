"""Cohort keys and values admitted per model (the caps on distinct keys and values)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.models import CohortValue, ModelRecord, table_of


def admitted(session: Session, model: str, keys: Collection[str]) -> dict[str, set[str]]:
    """Every cohort key admitted for ``model``, with its admitted values for those in ``keys``
    (the others map to an empty set: they count against the key cap, their values do not
    matter)."""
    out: dict[str, set[str]] = {
        key: set()
        for key in session.scalars(
            select(CohortValue.key).where(CohortValue.model == model).distinct()
        )
    }
    wanted = [k for k in keys if k in out]
    if wanted:
        rows = session.execute(
            select(CohortValue.key, CohortValue.value).where(
                CohortValue.model == model, CohortValue.key.in_(wanted)
            )
        )
        for key, value in rows:
            out[key].add(value)
    return out


def lock_model(session: Session, model: str) -> None:
    """Hold the model's row until commit (PostgreSQL; SQLite transactions are serialised already).

    Taken before re-reading the admitted keys and values, so two batches cannot both admit the
    last key or value under a cap.
    """
    query = select(ModelRecord.name).where(ModelRecord.name == model)
    session.execute(backend_of(session).for_update(query))


def admit_values(session: Session, model: str, values: Mapping[str, Sequence[str]]) -> None:
    """Record newly admitted values (the caller holds ``lock_model``)."""
    if not any(values.values()):
        return
    insert = backend_of(session).insert(table_of(CohortValue))
    session.execute(
        insert.on_conflict_do_nothing(),
        [{"model": model, "key": k, "value": v} for k, vs in values.items() for v in vs],
    )
