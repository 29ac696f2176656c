"""Retention: remove predictions and labels older than a cutoff, and remember the cutoff.

Contracts, calibration buckets, stored readings, gate decisions and the audit log are never
touched: the aggregates carry every window's statistics after the rows are gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable

from service.db import partitions
from service.db.backend import backend_of
from service.db.models import (
    LabelRecord,
    ModelRecord,
    PredictionKey,
    PredictionRecord,
    PruneRecord,
)


@dataclass(frozen=True)
class PruneCounts:
    """What one prune removed: whole daily partitions, predictions and labels (rows)."""

    partitions_dropped: int
    predictions: int
    labels: int


def _deleted(session: Session, statement: Executable) -> int:
    return int(cast(CursorResult[Any], session.execute(statement)).rowcount)


def prune_before(session: Session, cutoff: datetime, now: datetime) -> PruneCounts:
    """Delete every prediction with event time before ``cutoff``, its key, and labels before it.

    Daily partitions that end at or before ``cutoff`` are dropped whole; rows before it left in
    the default partition (or, on SQLite, in the one table) are deleted. Labels go by their own
    time (when the outcome became known), per model through ``labels(model, ts)``. Records the
    prune, which moves the retention horizon, in the caller's transaction.
    """
    connection = session.connection()
    dropped = partitions.drop_partitions_before(connection, cutoff)
    session.execute(delete(PredictionRecord).where(PredictionRecord.ts < cutoff))
    backend_of(session).after_prune(connection, cutoff)
    predictions = _deleted(session, delete(PredictionKey).where(PredictionKey.ts < cutoff))
    labels = 0
    for model in session.scalars(select(ModelRecord.name).order_by(ModelRecord.name)):
        labels += _deleted(
            session, delete(LabelRecord).where(LabelRecord.model == model, LabelRecord.ts < cutoff)
        )
    counts = PruneCounts(len(dropped), predictions, labels)
    session.add(
        PruneRecord(
            cutoff=cutoff,
            pruned_at=now,
            partitions_dropped=counts.partitions_dropped,
            predictions=counts.predictions,
            labels=counts.labels,
        )
    )
    session.flush()
    return counts


def retention_horizon(session: Session) -> datetime | None:
    """The latest prune cutoff: no prediction before it is stored (None if never pruned)."""
    return session.scalar(select(func.max(PruneRecord.cutoff)))
