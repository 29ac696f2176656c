"""Stored readings: the latest reading per (model, cohort slice, window), served to Prometheus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from service.db.models import ModelRecord, StoredExposition, StoredReading


@dataclass(frozen=True)
class ReadingRow:
    """One stored reading: what the gauges of one label set show."""

    model: str
    cohort: str
    window: str
    contract_id: str
    contract_version: int
    computed_at: datetime
    values: dict[str, Any]


def replace_model_readings(session: Session, model: str, rows: Sequence[ReadingRow]) -> None:
    """Swap every stored reading of ``model`` for ``rows`` (in the caller's transaction)."""
    session.execute(delete(StoredReading).where(StoredReading.model == model))
    session.add_all(
        StoredReading(
            model=r.model,
            cohort=r.cohort,
            window=r.window,
            contract_id=r.contract_id,
            contract_version=r.contract_version,
            computed_at=r.computed_at,
            values=r.values,
        )
        for r in rows
    )
    session.flush()


def model_readings(session: Session, model: str) -> dict[tuple[str, str], ReadingRow]:
    """The stored readings of one model by (cohort, window)."""
    return {(r.cohort, r.window): r for r in all_readings(session, model)}


def all_readings(session: Session, model: str | None = None) -> list[ReadingRow]:
    """Every stored reading (of one model), in a stable order."""
    query = select(StoredReading).order_by(
        StoredReading.model, StoredReading.cohort, StoredReading.window
    )
    if model is not None:
        query = query.where(StoredReading.model == model)
    return [
        ReadingRow(
            r.model,
            r.cohort,
            r.window,
            r.contract_id,
            r.contract_version,
            r.computed_at,
            dict(r.values),
        )
        for r in session.scalars(query)
    ]


EXPOSITION = "calibration"


def store_exposition(session: Session, body: bytes, computed_at: datetime) -> None:
    """Replace the stored Prometheus text of the calibration gauges."""
    session.execute(delete(StoredExposition).where(StoredExposition.name == EXPOSITION))
    session.add(StoredExposition(name=EXPOSITION, body=body, computed_at=computed_at))
    session.flush()


def readings_times(session: Session) -> dict[str, tuple[datetime, datetime | None]]:
    """Per model: when its first contract was registered, and when its stored readings were
    computed (None: it has none yet)."""
    rows = session.execute(
        select(ModelRecord.name, ModelRecord.created_at, func.min(StoredReading.computed_at))
        .outerjoin(StoredReading, StoredReading.model == ModelRecord.name)
        .group_by(ModelRecord.name, ModelRecord.created_at)
        .order_by(ModelRecord.name)
    )
    return {name: (created, computed) for name, created, computed in rows}


def stored_exposition(session: Session) -> tuple[bytes, datetime] | None:
    """The stored gauge text and when it was rendered, if any."""
    row = session.execute(
        select(StoredExposition.body, StoredExposition.computed_at).where(
            StoredExposition.name == EXPOSITION
        )
    ).first()
    return None if row is None else (bytes(row[0]), row[1])
