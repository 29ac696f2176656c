"""The label fold's queue: joined labels acknowledged before their buckets count them.

A row of ``unfolded_labels`` is a label joined to its stored prediction but not yet in its
buckets. The fold claims rows by deleting them (``claim``) in the transaction that adds them to
their buckets, so a row is counted by exactly one committed transaction: a fold that fails
before its commit leaves every row it claimed queued, and of two folds claiming the same row the
second waits for the first and then finds it gone (row locks on PostgreSQL, the database lock on
SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, bindparam, delete, func, literal, select, text, union_all
from sqlalchemy.orm import Session

from service.common.values import format_timestamp
from service.db import staging
from service.db.backend import backend_of
from service.db.models import LabelFoldMark, UnfoldedLabel
from service.db.types import UTCDateTime

_NOW = bindparam("now", type_=UTCDateTime())
_CUTOFF = bindparam("cutoff", type_=UTCDateTime())


@dataclass(frozen=True)
class ClaimedLabels:
    """Queued labels just claimed, with their predictions, column by column (R rows).

    ``seconds`` is each prediction's event time in whole seconds since the epoch, ``slices`` its
    stored JSON slice list and ``inputs`` its stored bytes. ``orphans`` counts claimed labels
    whose prediction is no longer stored (pruned meanwhile): they are dropped, not counted.
    """

    ids: list[str]
    labels: list[int]
    contract_ids: list[str]
    seconds: list[int]
    slices: list[str]
    inputs: list[bytes]
    orphans: int


@dataclass(frozen=True)
class FoldStatus:
    """What a model's readings leave out: labels acknowledged but not yet folded, the
    acknowledgement time of the oldest of them (None: none waits), and when the fold last
    counted labels of the model (None: never)."""

    unfolded: int
    oldest_queued_at: datetime | None
    last_fold_at: datetime | None


#: The status of a model whose labels were never queued.
NO_FOLD = FoldStatus(0, None, None)


def fold_fields(status: FoldStatus) -> dict[str, Any]:
    """What a reading or history point states of the fold: ``labels_unfolded`` and
    ``last_fold_at`` (RFC 3339, or None before the first fold)."""
    last = status.last_fold_at
    return {
        "labels_unfolded": status.unfolded,
        "last_fold_at": None if last is None else format_timestamp(last),
    }


def enqueue(session: Session, model: str, labels: Sequence[tuple[str, int]], now: datetime) -> None:
    """Queue joined labels ``(id, class index)`` of ``model`` for the fold, acknowledged
    ``now`` (in the caller's transaction)."""
    if not labels:
        return
    staging.load(session, "stage_fold_labels", labels)
    session.execute(
        text(
            "INSERT INTO unfolded_labels (model, id, label, queued_at)"
            " SELECT CAST(:model AS VARCHAR), id, label, :now FROM stage_fold_labels ORDER BY id"
        ).bindparams(_NOW),
        {"model": model, "now": now},
    )


def claim(session: Session, model: str, upto: datetime, limit: int) -> ClaimedLabels:
    """Delete up to ``limit`` queued labels of ``model`` acknowledged at or before ``upto`` (in
    key order) and return them with their predictions; the caller counts them in the same
    transaction. A row another transaction claims at the same time is left to it (PostgreSQL
    waits for that transaction's end and skips the row if it was deleted)."""
    rows = backend_of(session).claim_queued_labels(
        session, {"model": model, "upto": upto, "limit": limit}
    )
    found = [row for row in rows if row[2] is not None]
    cols: list[tuple[Any, ...]] = list(zip(*found, strict=True)) if found else [()] * 6
    return ClaimedLabels(
        ids=list(cols[0]),
        labels=[int(v) for v in cols[1]],
        contract_ids=list(cols[2]),
        seconds=[int(v) for v in cols[3]],
        slices=list(cols[4]),
        inputs=[bytes(b) for b in cols[5]],
        orphans=len(rows) - len(found),
    )


def any_queued(session: Session, model: str, upto: datetime) -> bool:
    """Whether a label of ``model`` acknowledged at or before ``upto`` is still queued."""
    found = select(UnfoldedLabel.id).where(
        UnfoldedLabel.model == model, UnfoldedLabel.queued_at <= upto
    )
    return bool(session.scalar(select(found.exists())))


def mark_folded(session: Session, model: str, now: datetime) -> None:
    """Record that a fold counted labels of ``model`` at ``now`` (in its transaction)."""
    insert = backend_of(session).insert(LabelFoldMark.__table__)  # type: ignore[arg-type]
    session.execute(
        insert.values(model=model, folded_at=now).on_conflict_do_update(
            index_elements=["model"], set_={"folded_at": now}
        )
    )


def models_with_queued(session: Session) -> list[str]:
    """Every model with labels queued for the fold, sorted."""
    return list(session.scalars(select(UnfoldedLabel.model).distinct().order_by("model")))


def fold_status(session: Session, model: str) -> FoldStatus:
    """The fold status of ``model`` (two primary-key range reads)."""
    count, oldest = session.execute(
        select(func.count(), func.min(UnfoldedLabel.queued_at)).where(UnfoldedLabel.model == model)
    ).one()
    last = session.scalar(select(LabelFoldMark.folded_at).where(LabelFoldMark.model == model))
    return FoldStatus(int(count or 0), _utc(oldest), _utc(last))


def fleet_fold_status(session: Session) -> dict[str, FoldStatus]:
    """The fold status of every model with queued labels or a fold mark, in one statement
    (a walk of the queue's primary key and of the marks)."""
    queued = select(
        UnfoldedLabel.model,
        func.count().label("n"),
        func.min(UnfoldedLabel.queued_at).label("oldest"),
        literal(None, UTCDateTime()).label("folded_at"),
    ).group_by(UnfoldedLabel.model)
    marks = select(
        LabelFoldMark.model,
        literal(0).label("n"),
        literal(None, UTCDateTime()).label("oldest"),
        LabelFoldMark.folded_at,
    )
    found: dict[str, FoldStatus] = {}
    for model, n, oldest, folded_at in session.execute(union_all(queued, marks)):
        seen = found.get(model, NO_FOLD)
        found[model] = FoldStatus(
            seen.unfolded + int(n),
            seen.oldest_queued_at or _utc(oldest),
            seen.last_fold_at or _utc(folded_at),
        )
    return dict(sorted(found.items()))


def drop_queue(session: Session, model: str) -> int:
    """Delete every queued label of ``model`` (its buckets are being rebuilt from the stored
    rows, which count them); returns how many."""
    result = session.execute(delete(UnfoldedLabel).where(UnfoldedLabel.model == model))
    return int(cast(CursorResult[Any], result).rowcount)


def queued_with_predictions_before(session: Session, cutoff: datetime) -> int:
    """How many queued labels belong to predictions with event time before ``cutoff`` (what a
    prune must not delete before the fold counts them)."""
    return int(
        session.scalar(
            text(
                "SELECT count(*) FROM unfolded_labels u JOIN predictions p"
                " ON p.model = u.model AND p.id = u.id WHERE p.ts < :cutoff"
            ).bindparams(_CUTOFF),
            {"cutoff": cutoff},
        )
        or 0
    )


def _utc(value: datetime | str | None) -> datetime | None:
    """A stored time as an aware UTC datetime (aggregates on SQLite come back as text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
