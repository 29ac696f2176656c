"""Retention of raw rows: ``calmon prune --older-than``, the horizon ingestion respects, and the
expiry of labels that wait too long for their prediction."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from service.audit import store as audit
from service.audit.events import PredictionsPruned
from service.common.errors import ErrorDetail, ValidationFailed
from service.config import Settings
from service.contracts import store as contracts_store
from service.stream import prediction_store
from service.stream.instruments import PENDING_LABELS_EXPIRED
from service.stream.retention_store import PruneCounts, prune_before
from service.stream.windows import floor_to, parse_duration

log = logging.getLogger(__name__)

SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class PruneReport:
    """A finished prune: the cutoff and what went, including the labels that had waited
    ``pending_label_days`` for their prediction, per model."""

    cutoff: datetime
    counts: PruneCounts
    pending_expired: dict[str, int] = field(default_factory=dict)


def pending_cutoff(settings: Settings, now: datetime) -> datetime:
    """Labels still waiting for their prediction that were received before this expire."""
    return now - timedelta(days=settings.pending_label_days)


def expire_pending(session: Session, model: str, settings: Settings, now: datetime) -> int:
    """Delete the labels of ``model`` that have waited ``pending_label_days`` for their
    prediction, commit, count them in ``calmon_pending_labels_expired_total``; returns how many."""
    expired = prediction_store.expire_waiting_labels(session, model, pending_cutoff(settings, now))
    session.commit()
    if expired:
        PENDING_LABELS_EXPIRED.labels(model).inc(expired)
        log.info("expired pending labels", extra={"model": model, "labels": expired})
    return expired


def prune_cutoff(older_than: timedelta, settings: Settings, now: datetime) -> datetime:
    """``now - older_than``, to the second: rows with an earlier event time go.

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
    return floor_to(now - older_than, SECOND)


def prune(
    session: Session, *, older_than: timedelta, settings: Settings, now: datetime, actor: str
) -> PruneReport:
    """Remove predictions and labels older than ``older_than``, and labels that have waited
    ``pending_label_days`` for their prediction; audit it.

    Contracts, aggregates, readings, gate decisions and the audit log are kept, and so are the
    labels queued for the fold: each carries what its buckets need of its prediction, so the
    fold counts it after its rows are gone. The removal is one transaction: on any failure
    nothing is removed.
    """
    cutoff = prune_cutoff(older_than, settings, now)
    counts = prune_before(session, cutoff, now)
    waited = pending_cutoff(settings, now)
    expired = {
        model: n
        for model in contracts_store.model_names(session)
        if (n := prediction_store.expire_waiting_labels(session, model, waited))
    }
    audit.append_event(
        session,
        PredictionsPruned(
            cutoff=cutoff.isoformat(),
            predictions=counts.predictions,
            labels=counts.labels,
            pending_labels_expired=sum(expired.values()),
        ),
        actor=actor,
        now=now,
    )
    session.commit()
    for model, n in expired.items():
        PENDING_LABELS_EXPIRED.labels(model).inc(n)
    return PruneReport(cutoff, counts, expired)
