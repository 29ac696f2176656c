"""A validated label batch applied in the caller's transaction: labels joined to their
predictions and read by their contracts, early ones kept waiting under the model's cap, repeats
compared, the joined ones counted in the statistics or queued for the fold; one commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from service.common.errors import ErrorCollector
from service.common.values import printable
from service.config import Settings
from service.contracts import store as contracts_store
from service.stream import fold_store, prediction_store
from service.stream.bucketing import epoch_seconds, shares_bucket
from service.stream.column_checks import LabelBatch
from service.stream.fold import COUNTED_AT, FOLD_AFTER, count_labels
from service.stream.instruments import (
    LABEL_DELAY,
    LABELS_INGESTED,
    PENDING_LABELS_REJECTED,
    observe_many,
)
from service.stream.label_classes import SentLabel, class_index, same_label
from service.stream.sql.columns import LabeledRows


@dataclass(frozen=True)
class LabelConflict:
    """A label that differs from the one stored for its id (not applied)."""

    id: str
    label: int | str
    stored_label: int | str
    reason: str


@dataclass
class LabelsApplied:
    """A label batch applied (``service.stream.replies.LabelsApplied`` reads it);
    ``delays_seconds`` feeds the label-delay histogram only."""

    model: str
    joined: int = 0
    pending: int = 0
    duplicates: int = 0
    conflicts: list[LabelConflict] = field(default_factory=list)
    delays_seconds: list[float] = field(default_factory=list)
    rejected_pending_ids: list[str] = field(default_factory=list)

    @property
    def rejected_pending(self) -> int:
        """How many waiting labels the per-model cap refused."""
        return len(self.rejected_pending_ids)

    def compare(
        self,
        ident: str,
        label: SentLabel,
        earlier: SentLabel,
        classes: Sequence[str] | None,
        reason: str,
    ) -> None:
        """Count a label met again: a duplicate if it agrees (``same_label``, read by the
        ``classes`` of its prediction's contract if known), else a conflict (not applied)."""
        if same_label(label, earlier, classes):
            self.duplicates += 1
        else:
            self.conflicts.append(LabelConflict(ident, label.as_sent(), earlier.as_sent(), reason))


def store_labels(
    session: Session,
    model: str,
    versions: dict[str, contracts_store.VersionClasses],
    batch: LabelBatch,
    settings: Settings,
    now: datetime,
) -> LabelsApplied:
    """Join validated labels, each judged by its prediction's contract, keep early ones
    waiting, compare repeats; one commit."""
    result = LabelsApplied(model=model)
    # In key order, the primary-key probes and inserts walk the indexes in order.
    staged = sorted(
        (ident, label.index, label.name, ts)
        for ident, label, ts in zip(batch.ids, batch.labels, batch.ts, strict=True)
    )
    joined, waiting, stored = prediction_store.record_labels(session, model, staged, now)
    if not versions.keys() >= set(joined.contract_ids):
        # A version registered since, with predictions bound to it already: read them again.
        versions = {v.id: v for v in contracts_store.model_classes(session, model)}
    item_of = dict(zip(batch.ids, batch.items, strict=True))
    _judge_joined(session, model, joined, versions, item_of)
    result.rejected_pending_ids = _cap_waiting(session, model, waiting, settings)
    result.pending = len(waiting) - result.rejected_pending
    _compare_repeats(session, result, batch, joined, stored, versions)
    result.joined = len(joined.ids)
    result.delays_seconds = joined.label_delays().astype(float).tolist()
    count_joined(session, model, joined, now)
    session.commit()
    _count_outcomes(result)
    return result


def _count_outcomes(result: LabelsApplied) -> None:
    """Count a committed label batch's outcomes and label delays in the stream's instruments;
    every outcome of the model is exported from its first batch on, at 0 if none came."""
    for outcome, count in (
        ("joined", result.joined),
        ("pending", result.pending),
        ("duplicate", result.duplicates),
        ("conflict", len(result.conflicts)),
    ):
        LABELS_INGESTED.labels(result.model, outcome).inc(count)
    observe_many(LABEL_DELAY.labels(result.model), result.delays_seconds)
    PENDING_LABELS_REJECTED.labels(result.model).inc(result.rejected_pending)


def _judge_joined(
    session: Session,
    model: str,
    joined: LabeledRows,
    versions: Mapping[str, contracts_store.VersionClasses],
    item_of: Mapping[str, int],
) -> None:
    """Read each just-joined label by its prediction's contract: store the class index it
    means there, or refuse the batch (``ValidationFailed`` naming each item, nothing written)
    if that contract has no such class. When every version has the same classes, the labels
    already hold the indices they mean (``parse_labels`` checked them), and nothing is read."""
    if len({v.classes for v in versions.values()}) == 1:
        return
    errors = ErrorCollector()
    fixes: list[tuple[str, int]] = []
    for r, (ident, contract_id) in enumerate(zip(joined.ids, joined.contract_ids, strict=True)):
        label = SentLabel(int(joined.labels[r]), joined.names[r])
        version = versions[contract_id]
        index = class_index(label, version.classes)
        if index is None:
            errors.add(
                f"labels[{item_of[ident]}].label",
                f"{_shown(label)} is not a class of contract version {version.version}"
                f" ({contract_id}), the contract of prediction {_shown_id(ident)}",
                item_of[ident],
            )
        elif index != label.index:
            fixes.append((ident, index))
            joined.labels[r] = index
    errors.raise_if_any(
        "labels name classes the contracts of their predictions do not have; nothing from this"
        " batch was written"
    )
    prediction_store.set_label_indices(session, model, fixes)


def _shown(label: SentLabel) -> str:
    if label.name is None:
        return f"class index {label.index}"
    return f"class name {printable(label.name)!r}"


def _shown_id(ident: str) -> str:
    return repr(printable(ident))


def _compare_repeats(
    session: Session,
    result: LabelsApplied,
    batch: LabelBatch,
    joined: LabeledRows,
    stored: Mapping[str, SentLabel],
    versions: Mapping[str, contracts_store.VersionClasses],
) -> None:
    """Count the labels met again, in the batch or stored before, as duplicates or conflicts,
    each read by its prediction's contract when it matters and the prediction is stored (a
    label sent by name and one by index)."""
    first = dict(zip(batch.ids, batch.labels, strict=True))
    again = [(i, label, first[i], "repeated in the batch") for i, label in batch.repeats]
    again += [
        (ident, first[ident], earlier, "a different label was received before")
        for ident, earlier in sorted(stored.items())
    ]
    contract_of = dict(zip(joined.ids, joined.contract_ids, strict=True))
    mixed = sorted(
        {i for i, a, b, _ in again if (a.name is None) != (b.name is None)} - contract_of.keys()
    )
    contract_of.update(prediction_store.prediction_contracts(session, result.model, mixed))
    for ident, label, earlier, reason in again:
        version = versions.get(contract_of.get(ident, ""))
        classes = None if version is None else version.classes
        result.compare(ident, label, earlier, classes, reason)


def _cap_waiting(session: Session, model: str, waiting: list[str], settings: Settings) -> list[str]:
    """Unstore the batch's new waiting labels (``waiting``, sorted ids) that would take the
    model's waiting labels over ``max_pending_labels``; returns their ids (the last in id order).

    Concurrent batches each count what is committed plus their own, so the cap can be exceeded by
    the waiting labels of batches committing at the same moment.
    """
    if not waiting:
        return []
    excess = prediction_store.count_waiting_labels(session, model) - settings.max_pending_labels
    if excess <= 0:
        return []
    rejected = waiting[max(len(waiting) - excess, 0) :]
    prediction_store.delete_waiting_labels(session, model, rejected)
    return rejected


def count_joined(session: Session, model: str, joined: LabeledRows, now: datetime | None) -> None:
    """Move just-joined labeled predictions from the unlabeled sums into the statistics.

    With ``now``, a late label (its prediction's event time more than ``FOLD_AFTER`` before
    ``now``) whose 5-minute bucket holds fewer than ``COUNTED_AT`` labels of the request (same
    contract and slice list) is queued for the fold instead, acknowledged ``now``
    (``service.stream.fold``); without ``now`` every label is counted here."""
    counted = np.ones(len(joined.ids), dtype=bool)
    if now is not None:
        recent = joined.seconds >= epoch_seconds([now - FOLD_AFTER])[0]
        counted = recent | shares_bucket(
            [f"{c}\x00{s}" for c, s in zip(joined.contract_ids, joined.slices, strict=True)],
            joined.seconds,
            COUNTED_AT,
        )
    count_labels(session, model, joined.take(np.flatnonzero(counted).tolist()))
    if now is not None:
        fold_store.enqueue(session, model, joined.take(np.flatnonzero(~counted).tolist()), now)
