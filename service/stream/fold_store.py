"""The label fold's queue: joined labels acknowledged before their buckets count them.

A row of ``unfolded_label_batches`` holds the labels one request left for the fold, each with
what its buckets need of its prediction (``LabeledRows``), as one Arrow IPC stream: the queue
costs a row per request, not per label, and the fold reads no prediction. The fold claims rows
by deleting them (``claim``) in the transaction that adds their labels to the buckets, so each
label is counted by exactly one committed transaction: a fold that fails before its commit
leaves every row it claimed queued, and of two folds claiming the same row the second waits for
the first and then finds it gone (row locks taken in queue order on PostgreSQL, the database
lock on SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import pyarrow as pa
from sqlalchemy import CursorResult, delete, func, insert, literal, select, union_all
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.models import LabelFoldMark, UnfoldedLabelBatch, table_of
from service.db.types import UTCDateTime
from service.stream.sql.columns import LabeledRows

_QUEUE = table_of(UnfoldedLabelBatch)

#: The columns of a batch's payload, one row per label: the columns of ``LabeledRows`` the
#: fold counts, each label's class index as its prediction's contract reads it.
BATCH_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("contract_id", pa.string()),
        ("seconds", pa.int64()),
        ("slices", pa.string()),
        ("inputs", pa.binary()),
        ("label", pa.int16()),
    ]
)


def encode_batch(queued: LabeledRows) -> bytes:
    """``queued`` as one Arrow IPC stream of one record batch (``BATCH_SCHEMA``)."""
    table = pa.table(
        [
            pa.array(queued.ids, pa.string()),
            pa.array(queued.contract_ids, pa.string()),
            pa.array(np.asarray(queued.seconds, dtype=np.int64)),
            pa.array(queued.slices, pa.string()),
            pa.array(queued.inputs, pa.binary()),
            pa.array(np.asarray(queued.labels, dtype=np.int16)),
        ],
        schema=BATCH_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BATCH_SCHEMA) as writer:
        writer.write_table(table)
    return cast(bytes, sink.getvalue().to_pybytes())


def decode_batches(payloads: Sequence[bytes]) -> LabeledRows:
    """The labels of the stored batch ``payloads`` (``encode_batch``), concatenated in order
    (their indices final: no names)."""
    tables = [pa.ipc.open_stream(payload).read_all() for payload in payloads]
    table = pa.concat_tables(tables) if tables else BATCH_SCHEMA.empty_table()
    return LabeledRows(
        ids=table.column("id").to_pylist(),
        contract_ids=table.column("contract_id").to_pylist(),
        seconds=table.column("seconds").to_numpy().astype(np.int64),
        slices=table.column("slices").to_pylist(),
        inputs=table.column("inputs").to_pylist(),
        labels=table.column("label").to_numpy().astype(np.int64),
        names=[None] * table.num_rows,
    )


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


class StatesFold:
    """What a reading states of the fold, read from its ``fold`` (a ``FoldStatus``)."""

    fold: FoldStatus

    @property
    def labels_unfolded(self) -> int:
        """The model's labels acknowledged but not yet folded into the buckets."""
        return self.fold.unfolded

    @property
    def last_fold_at(self) -> datetime | None:
        """When the fold last counted labels of the model (None: never)."""
        return self.fold.last_fold_at


def enqueue(session: Session, model: str, queued: LabeledRows, now: datetime) -> None:
    """Queue joined labels of ``model`` for the fold as one batch, acknowledged ``now`` (in
    the caller's transaction)."""
    if not len(queued):
        return
    session.execute(
        insert(_QUEUE).values(
            model=model, queued_at=now, labels=len(queued), payload=encode_batch(queued)
        )
    )


def claim(
    session: Session, model: str, upto: datetime, limit: int, *, at_most: bool = False
) -> LabeledRows:
    """Delete the oldest queued batches of ``model`` acknowledged at or before ``upto`` and
    return their labels in queue order; the caller counts them in the same transaction.

    The batches taken are as many as hold fewer than ``limit`` labels before the last (at
    least one), or with ``at_most`` as many as hold at most ``limit`` labels in all (none if
    the oldest alone holds more). The batches are first locked in queue order (PostgreSQL's
    ``FOR UPDATE``; SQLite's writers are serialised already), so claims running at once wait
    for each other in one order and never deadlock: a batch another transaction claims at the
    same time is waited for and skipped once that transaction has deleted it.
    """
    queue = _QUEUE.c
    through = func.sum(queue.labels).over(order_by=queue.seq)
    running = (
        select(queue.seq, through.label("through"), (through - queue.labels).label("before"))
        .where(queue.model == model, queue.queued_at <= upto)
        .subquery()
    )
    taken = running.c.through <= limit if at_most else running.c.before < limit
    locked = (
        select(queue.seq)
        .where(queue.model == model, queue.seq.in_(select(running.c.seq).where(taken)))
        .order_by(queue.seq)
        .with_for_update()
        .correlate(None)
    )
    claimed = session.execute(
        delete(_QUEUE).where(queue.seq.in_(locked)).returning(queue.seq, queue.payload)
    ).all()
    return decode_batches([bytes(payload) for _, payload in sorted(claimed)])


def any_queued(session: Session, model: str, upto: datetime) -> bool:
    """Whether a label of ``model`` acknowledged at or before ``upto`` is still queued."""
    found = select(UnfoldedLabelBatch.seq).where(
        UnfoldedLabelBatch.model == model, UnfoldedLabelBatch.queued_at <= upto
    )
    return bool(session.scalar(select(found.exists())))


def mark_folded(session: Session, model: str, now: datetime) -> None:
    """Record that a fold counted labels of ``model`` at ``now`` (in its transaction)."""
    upsert = backend_of(session).insert(table_of(LabelFoldMark))
    session.execute(
        upsert.values(model=model, folded_at=now).on_conflict_do_update(
            index_elements=["model"], set_={"folded_at": now}
        )
    )


def models_with_queued(session: Session) -> list[str]:
    """Every model with labels queued for the fold, sorted."""
    return list(session.scalars(select(UnfoldedLabelBatch.model).distinct().order_by("model")))


def fold_status(session: Session, model: str) -> FoldStatus:
    """The fold status of ``model`` (a walk of its queued batches, one row per request, and
    a primary-key read of its mark)."""
    count, oldest = session.execute(
        select(
            func.coalesce(func.sum(UnfoldedLabelBatch.labels), 0),
            func.min(UnfoldedLabelBatch.queued_at),
        ).where(UnfoldedLabelBatch.model == model)
    ).one()
    last = session.scalar(select(LabelFoldMark.folded_at).where(LabelFoldMark.model == model))
    return FoldStatus(int(count or 0), _utc(oldest), _utc(last))


def fleet_fold_status(session: Session) -> dict[str, FoldStatus]:
    """The fold status of every model with queued labels or a fold mark, in one statement
    (a walk of the queued batches and of the marks)."""
    queued = select(
        UnfoldedLabelBatch.model,
        func.sum(UnfoldedLabelBatch.labels).label("n"),
        func.min(UnfoldedLabelBatch.queued_at).label("oldest"),
        literal(None, UTCDateTime()).label("folded_at"),
    ).group_by(UnfoldedLabelBatch.model)
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
    """Delete every queued batch of ``model`` (its buckets are being rebuilt from the stored
    rows, which count their labels); returns how many batches."""
    result = session.execute(delete(UnfoldedLabelBatch).where(UnfoldedLabelBatch.model == model))
    return int(cast(CursorResult[Any], result).rowcount)


def _utc(value: datetime | str | None) -> datetime | None:
    """A stored time as an aware UTC datetime (aggregates on SQLite come back as text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
