"""The label fold: labels acknowledged by their request and counted in their buckets later.

A label request counts at once the labels of predictions from the last ``FOLD_AFTER`` (the
windows most alerts read stay exact) and the older ones that fall at least ``COUNTED_AT`` to a
5-minute bucket (of the same contract and slice list): their bucket rows are rewritten once for
several labels. An older label with fewer companions in its bucket (late and scattered labels
mostly are) would rewrite four or more bucket rows for itself and at most two others; it is
queued instead (``fold_store``: one row per request, carrying what the buckets need of each
prediction), and the fold counts the queued labels of a model together, each touched bucket row
rewritten once per fold chunk of about ``FOLD_CHUNK`` labels.

Every chunk is one transaction that deletes the queued batches it counts and adds their sums to
the buckets, so a fold cut short anywhere before its commit leaves those labels queued, and two
folds at once count each label once (``fold_store.claim``). The refresher folds every model
under its lease at the start of each cycle. A read folds its model's waiting labels first
when at most ``READ_FOLD_LIMIT`` wait (``fold_for_read``), so a read counts every label
acknowledged before it whenever that is bounded work; above the limit it reads at once and
states the labels it leaves out. A reader asking for ``consistent=true`` folds them all first.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from sqlalchemy.orm import Session

from service.contracts import store as contracts_store
from service.stream import fold_store
from service.stream.bucket_store import BucketDelta, BucketKey, apply_deltas
from service.stream.bucketing import bucket_deltas, merge_deltas, parsed_slices, stored_inputs
from service.stream.sql.columns import LabeledRows

#: Labels of predictions at least this old may wait for the fold; younger ones never do.
FOLD_AFTER = timedelta(hours=24)

#: A request counts its late labels itself only where at least this many of them fall in one
#: 5-minute bucket (same contract and slice list), so that its bucket rows are rewritten for at
#: most a quarter of a row per slice and label; the others wait for the fold.
COUNTED_AT = 4

#: Rows evaluated together by ``count_labels``.
BLOCK = 4_096

#: Queued labels counted per fold transaction (whole batches: the last may take it past this).
FOLD_CHUNK = 500_000

#: A read folds its model's waiting labels first when at most this many wait. Queued labels
#: mostly share no bucket (each rewrites about four bucket rows): on a loaded 2-core machine a
#: 30-day reading folding 100 of them took 196-260 ms where it took 180 ms (p50) with none
#: waiting, and one folding 10,000 took 4-6 s (``bench/bench_read_fold.py``,
#: docs/performance.md).
READ_FOLD_LIMIT = 100


def count_labels(session: Session, model: str, rows: LabeledRows) -> None:
    """Move labeled predictions (``rows``, their labels' class indices final) from the
    unlabeled sums into the statistics of their buckets, one set-based write
    (``apply_deltas``).

    The rows of each contract are evaluated in event-time order, ``BLOCK`` at a time: a
    block's rows fall in few buckets, and the grouped statistics cost grows with the rows times
    the groups of one evaluation (``grouped_knot_sums`` forms dense per-group sums per chunk of
    rows), which over the thousands of buckets a fold touches would dominate it."""
    if not len(rows):
        return
    deltas: dict[BucketKey, BucketDelta] = {}
    contract_of = np.array(rows.contract_ids, dtype=object)
    for contract_id in sorted(set(rows.contract_ids)):
        contract = contracts_store.get_contract(session, contract_id)
        assert contract is not None
        mine = np.flatnonzero(contract_of == contract_id)
        mine = mine[np.argsort(rows.seconds[mine], kind="stable")]
        for start in range(0, mine.size, BLOCK):
            block = mine[start : start + BLOCK].tolist()
            merge_deltas(
                deltas,
                bucket_deltas(
                    contract,
                    seconds=rows.seconds[block],
                    slices=parsed_slices([rows.slices[r] for r in block]),
                    inputs=stored_inputs(contract, [rows.inputs[r] for r in block]),
                    labels=rows.labels[block],
                    new=False,
                ),
            )
    apply_deltas(session, model, deltas)


def fold_chunk(session: Session, model: str, upto: datetime, now: datetime) -> int:
    """Count the queued labels of ``model`` acknowledged at or before ``upto``, about
    ``FOLD_CHUNK`` of them, in the caller's transaction (the caller commits); returns how many
    were claimed (0: none left to this transaction)."""
    claimed = fold_store.claim(session, model, upto, FOLD_CHUNK)
    if not len(claimed):
        return 0
    count_labels(session, model, claimed)
    fold_store.mark_folded(session, model, now)
    return len(claimed)


def fold_model(session: Session, model: str, now: datetime, upto: datetime | None = None) -> int:
    """Count every queued label of ``model`` acknowledged at or before ``upto`` (default
    ``now``), committing each chunk; returns how many this call counted.

    Ends the session's transaction. Labels another fold is counting at the same moment are left
    to it, and this call returns only once they are committed, so on return every label
    acknowledged by ``upto`` is in the buckets."""
    upto = now if upto is None else upto
    total = 0
    while True:
        done = fold_chunk(session, model, upto, now)
        session.commit()
        total += done
        if not done and not fold_store.any_queued(session, model, upto):
            session.commit()
            return total


def fold_for_read(session: Session, model: str, now: datetime) -> int:
    """Count the queued labels of ``model`` acknowledged at or before ``now`` in one
    transaction, if at most ``READ_FOLD_LIMIT`` labels of the model wait; returns how many
    this call counted (0: none waits, too many wait, or another fold counted them).

    Ends the session's transaction. Labels another fold is counting at the same moment (at
    most the limit, or the read would not fold) are waited for and left to it, so on return
    every label acknowledged by ``now`` is in the buckets unless more than the limit waited."""
    waiting = fold_store.fold_status(session, model).unfolded
    if not waiting or waiting > READ_FOLD_LIMIT:
        session.commit()
        return 0
    claimed = fold_store.claim(session, model, now, READ_FOLD_LIMIT, at_most=True)
    if len(claimed):
        count_labels(session, model, claimed)
        fold_store.mark_folded(session, model, now)
    session.commit()
    return len(claimed)
