"""Retention of raw rows: ``calmon prune --older-than`` and the horizon ingestion respects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import ErrorDetail, ValidationFailed
from service.storage import audit
from service.storage.retention import PruneCounts, prune_before
from service.windows import floor_to, parse_duration

DAY = timedelta(days=1)


@dataclass(frozen=True)
class PruneReport:
    """A finished prune: the cutoff (a UTC midnight) and what went."""

    cutoff: datetime
    counts: PruneCounts


def prune_cutoff(older_than: timedelta, settings: Settings, now: datetime) -> datetime:
    """The UTC midnight at or before ``now - older_than``: whole days go, whole partitions drop.

    ``older_than`` must cover the longest configured window: the refit temperature of a reading
    samples the window's rows, which must still be there.
    """
    longest = max(parse_duration(w) for w in settings.windows)
    if older_than < longest:
        message = (
            f"--older-than {older_than} is shorter than the longest window in CALMON_WINDOWS"
            f" ({longest}); the readings of that window still need its rows"
        )
        raise ValidationFailed(message, [ErrorDetail("older_than", message)])
    return floor_to(now - older_than, DAY)


def prune(
    session: Session, *, older_than: timedelta, settings: Settings, now: datetime, actor: str
) -> PruneReport:
    """Remove predictions and labels older than ``older_than`` (to a UTC midnight) and audit it.

    Contracts, aggregates, readings, gate decisions and the audit log are kept. One transaction:
    on any failure nothing is removed.
    """
    cutoff = prune_cutoff(older_than, settings, now)
    counts = prune_before(session, cutoff, now)
    audit.append_event(
        session,
        type="predictions_pruned",
        actor=actor,
        now=now,
        details={
            "cutoff": cutoff.isoformat(),
            "partitions_dropped": counts.partitions_dropped,
            "predictions": counts.predictions,
            "labels": counts.labels,
        },
    )
    session.commit()
    return PruneReport(cutoff, counts)
