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

from service.db.models import LabelRecord, PredictionRecord, PruneRecord
from service.stream.sql import for_session


@dataclass(frozen=True)
class PruneCounts:
    """What one prune deleted: predictions and labels (rows)."""

    predictions: int
    labels: int


def _deleted(session: Session, statement: Executable) -> int:
    return int(cast(CursorResult[Any], session.execute(statement)).rowcount)


def prune_before(session: Session, cutoff: datetime, now: datetime) -> PruneCounts:
    """Delete every prediction and every label with event time before ``cutoff``.

    Predictions go by ``ts`` and labels by their own time (when the outcome became known), each
    across all models through the BRIN index on ``ts`` (whole block ranges before the cutoff;
    a b-tree on SQLite). The deleted rows are dead tuples until VACUUM reclaims them. Records
    the prune, which moves the retention horizon, in the caller's transaction.
    """
    predictions = _deleted(session, delete(PredictionRecord).where(PredictionRecord.ts < cutoff))
    for_session(session).after_prune(session, cutoff)
    labels = _deleted(session, delete(LabelRecord).where(LabelRecord.ts < cutoff))
    counts = PruneCounts(predictions, labels)
    session.add(
        PruneRecord(
            cutoff=cutoff,
            pruned_at=now,
            predictions=counts.predictions,
            labels=counts.labels,
        )
    )
    session.flush()
    return counts


def retention_horizon(session: Session) -> datetime | None:
    """The latest prune cutoff: no prediction before it is stored (None if never pruned)."""
    return session.scalar(select(func.max(PruneRecord.cutoff)))
