"""Stored readings: the latest reading per (model, cohort slice, window), served to Prometheus,
and the stored exposition assembled from them."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.orm import Session

from service.db.models import StoredExposition, StoredReading


@dataclass(frozen=True)
class ReadingRow:
    """One stored reading: what the gauges of one label set show, and when its trailing
    window's edge passes a bucket holding data (``stale_at``; None: never by time)."""

    model: str
    cohort: str
    window: str
    contract_id: str
    contract_version: int
    computed_at: datetime
    values: dict[str, Any]
    stale_at: datetime | None = None


def _record(r: ReadingRow) -> StoredReading:
    return StoredReading(
        model=r.model,
        cohort=r.cohort,
        window=r.window,
        contract_id=r.contract_id,
        contract_version=r.contract_version,
        computed_at=r.computed_at,
        values=r.values,
        stale_at=r.stale_at,
    )


def replace_model_readings(session: Session, model: str, rows: Sequence[ReadingRow]) -> None:
    """Swap every stored reading of ``model`` for ``rows`` (in the caller's transaction)."""
    replace_readings(session, [model], rows)


def replace_readings(session: Session, models: Sequence[str], rows: Sequence[ReadingRow]) -> None:
    """Swap every stored reading of ``models`` for ``rows`` (their readings, in the caller's
    transaction): one delete and one insert per 500 models."""
    names = sorted(set(models))
    for i in range(0, len(names), 500):
        session.execute(delete(StoredReading).where(StoredReading.model.in_(names[i : i + 500])))
    session.add_all(_record(r) for r in rows)
    session.flush()


def write_readings(
    session: Session,
    model: str,
    rows: Sequence[ReadingRow],
    obsolete: Iterable[tuple[str, str]] = (),
) -> None:
    """Store ``rows`` (replacing the model's readings of the same cohort and window) and delete
    the ``obsolete`` (cohort, window) readings, in the caller's transaction."""
    keys = sorted({(r.cohort, r.window) for r in rows} | set(obsolete))
    for i in range(0, len(keys), 300):
        session.execute(
            delete(StoredReading).where(
                StoredReading.model == model,
                tuple_(StoredReading.cohort, StoredReading.window).in_(keys[i : i + 300]),
            )
        )
    session.add_all(_record(r) for r in rows)
    session.flush()


def model_readings(session: Session, model: str) -> dict[tuple[str, str], ReadingRow]:
    """The stored readings of one model by (cohort, window)."""
    return {(r.cohort, r.window): r for r in all_readings(session, model)}


def all_readings(
    session: Session, model: str | None = None, models: Sequence[str] | None = None
) -> list[ReadingRow]:
    """Every stored reading (of one model, or of ``models``), in a stable order."""
    query = select(StoredReading).order_by(
        StoredReading.model, StoredReading.cohort, StoredReading.window
    )
    if model is not None:
        query = query.where(StoredReading.model == model)
    if models is not None:
        query = query.where(StoredReading.model.in_(list(models)))
    return [
        ReadingRow(
            r.model,
            r.cohort,
            r.window,
            r.contract_id,
            r.contract_version,
            r.computed_at,
            dict(r.values),
            r.stale_at,
        )
        for r in session.scalars(query)
    ]


EXPOSITION = "calibration"


@dataclass(frozen=True)
class ExpositionTimes:
    """When the stored exposition was assembled, the models it covers, and since when the
    readings of those not current as of then are current (``behind``, epoch seconds)."""

    computed_at: datetime
    models: tuple[str, ...]
    behind: dict[str, float]

    @classmethod
    def of(cls, computed_at: datetime, model_times: dict[str, Any] | None) -> ExpositionTimes:
        times = model_times or {}
        return cls(
            computed_at,
            tuple(times.get("models", ())),
            {str(k): float(v) for k, v in (times.get("behind") or {}).items()},
        )

    def to_json(self) -> dict[str, Any]:
        return {"models": list(self.models), "behind": dict(sorted(self.behind.items()))}

    def current_since(self, model: str) -> float:
        """Since when (epoch seconds) the served readings of ``model`` are current."""
        return self.behind.get(model, self.computed_at.timestamp())

    @functools.cached_property
    def covered(self) -> frozenset[str]:
        """The models it covers, as a set."""
        return frozenset(self.models)


def store_exposition(
    session: Session,
    body: bytes | None,
    computed_at: datetime,
    times: ExpositionTimes | None = None,
) -> None:
    """Replace the stored Prometheus text of the calibration gauges, or with ``body`` None keep
    the stored text and only move its time and model times (the caller commits)."""
    model_times = None if times is None else times.to_json()
    if body is None:
        session.execute(
            update(StoredExposition)
            .where(StoredExposition.name == EXPOSITION)
            .values(computed_at=computed_at, model_times=model_times)
        )
        session.flush()
        return
    session.execute(delete(StoredExposition).where(StoredExposition.name == EXPOSITION))
    session.add(
        StoredExposition(
            name=EXPOSITION,
            body=body,
            computed_at=computed_at,
            model_times=model_times,
            body_sha256=hashlib.sha256(body).hexdigest(),
        )
    )
    session.flush()


def exposition_times(session: Session) -> ExpositionTimes | None:
    """The stored exposition's times (not its text), if there is one."""
    row = session.execute(
        select(StoredExposition.computed_at, StoredExposition.model_times).where(
            StoredExposition.name == EXPOSITION
        )
    ).first()
    return None if row is None else ExpositionTimes.of(row[0], row[1])


@dataclass(frozen=True)
class StoredText:
    """The stored exposition as a scrape serves it: its text, the text's SHA-256 (hex) and its
    times."""

    body: bytes
    sha256: str
    times: ExpositionTimes


def stored_exposition(session: Session, known: StoredText | None = None) -> StoredText | None:
    """The stored exposition, if there is one, each version read whole in one statement.

    With ``known`` (what an earlier call returned), the text is read again only if it changed:
    one statement reads the digest and the times, and when the digest is ``known``'s the text
    is ``known``'s; else a second statement reads the whole row.
    """
    if known is not None:
        row = session.execute(
            select(
                StoredExposition.body_sha256,
                StoredExposition.computed_at,
                StoredExposition.model_times,
            ).where(StoredExposition.name == EXPOSITION)
        ).first()
        if row is None:
            return None
        if row[0] == known.sha256:
            return StoredText(known.body, known.sha256, ExpositionTimes.of(row[1], row[2]))
    row = session.execute(
        select(
            StoredExposition.body,
            StoredExposition.body_sha256,
            StoredExposition.computed_at,
            StoredExposition.model_times,
        ).where(StoredExposition.name == EXPOSITION)
    ).first()
    if row is None:
        return None
    body = bytes(row[0])
    digest = row[1] or hashlib.sha256(body).hexdigest()
    return StoredText(body, digest, ExpositionTimes.of(row[2], row[3]))
