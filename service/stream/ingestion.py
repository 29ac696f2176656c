"""Use cases of the production stream: store predictions, join labels, keep buckets current.

Each call validates the whole batch first, then writes everything in one transaction and commits
once, so an acknowledged batch is fully visible to readings and a rejected one leaves no trace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from service.common.errors import (
    Conflict,
    ErrorCollector,
    ErrorDetail,
    NoActiveContract,
    NotFound,
    ValidationFailed,
)
from service.config import Settings
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.db.database import Database
from service.stream import fold_store, prediction_store
from service.stream.batch_columns import LabelBatch, PredictionBatch
from service.stream.bucket_store import apply_deltas
from service.stream.bucketing import bucket_deltas, epoch_seconds, shares_bucket
from service.stream.cohorts import admit_cohorts, slices_of
from service.stream.fold import COUNTED_AT, FOLD_AFTER, count_labels
from service.stream.idempotency import (
    canonical_cohort,
    dedupe_batch,
    distinct_cohorts,
    row_bytes,
)
from service.stream.instruments import (
    LABEL_DELAY,
    LABELS_INGESTED,
    PENDING_LABELS_DISCARDED,
    PENDING_LABELS_REJECTED,
    PREDICTIONS_INGESTED,
    observe_many,
)
from service.stream.label_classes import SentLabel, class_index, known_labels, same_label
from service.stream.retention_store import retention_horizon
from service.stream.sent_batches import SentBatch
from service.stream.sql.columns import LabeledRows, PredictionColumns


@dataclass(frozen=True)
class PredictionsAccepted:
    """A prediction batch stored (``service.stream.replies.PredictionsAccepted`` reads it):
    ``discarded_pending_labels`` are waiting labels of these predictions that named a class
    their contract does not have (deleted, not counted)."""

    model: str
    accepted: int
    duplicates: int
    contract_id: str
    joined_pending_labels: int
    discarded_pending_labels: int = 0


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


def _model_or_404(session: Session, model: str) -> None:
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}: register a contract for it first")


def _binding_contract(
    session: Session, model: str, contract_id: str | None, now: datetime
) -> Contract:
    """The contract a batch names, or else the model's active contract now."""
    if contract_id is not None:
        contract = contracts_store.get_contract(session, contract_id)
        if contract is None:
            raise NotFound(f"no contract with id {contract_id!r}")
        if contract.model != model:
            raise ValidationFailed(
                "the contract belongs to another model",
                [
                    ErrorDetail(
                        "contract_id",
                        f"contract {contract_id} is for model {contract.model!r}, not {model!r}",
                    )
                ],
            )
        return contract
    contract = contracts_store.active_contract_at(session, model, now)
    if contract is None:
        raise NoActiveContract(f"model {model!r} has no active contract to bind predictions to")
    return contract


def _check_retention_horizon(session: Session, ts: Sequence[datetime]) -> None:
    """Refuse predictions older than the last prune: their rows are gone, retries look new."""
    horizon = retention_horizon(session)
    if horizon is None:
        return
    stale = [i for i, t in enumerate(ts) if t < horizon]
    if stale:
        raise ValidationFailed(
            f"{len(stale)} predictions are older than the retention horizon; nothing from this "
            "batch was written",
            [
                ErrorDetail(
                    f"predictions[{i}].ts",
                    f"is before the retention horizon {horizon.isoformat()} (calmon prune): a"
                    " prediction that old can no longer be told from a retried one",
                    i,
                )
                for i in stale[:20]
            ],
        )


def ingest_predictions(
    db: Database,
    session: Session,
    sent: SentBatch,
    settings: Settings,
    now: datetime,
) -> PredictionsAccepted:
    """Store a batch of predictions idempotently and join any labels that were waiting.

    The model and its contract are read, and the rows validated (``SentBatch.predictions``:
    JSON items or Arrow columns; a JSON body is also held to the rule that no object repeats a
    key), in a read session of ``db`` (on SQLite it neither takes nor waits for the write lock):
    the write transaction on ``session`` begins only once the batch is known valid. It binds
    the batch to the contract it reads itself, which is the one validated against unless a
    contract was registered or retired meanwhile (the rows are then validated again)."""
    with db.read_session() as reading:
        _model_or_404(reading, sent.model)
        contract = _binding_contract(reading, sent.model, sent.contract_id, now)
    batch = _predictions(sent, contract, now)
    bound = _binding_contract(session, sent.model, sent.contract_id, now)
    if bound.id != contract.id:
        batch = _predictions(sent, bound, now)
    return _store_predictions(session, sent.model, bound, batch, settings, now)


def _predictions(sent: SentBatch, contract: Contract, now: datetime) -> PredictionBatch:
    spec = contract.spec
    return sent.predictions(task=spec.task, n_classes=len(spec.classes), now=now)


def _store_predictions(
    session: Session,
    model: str,
    contract: Contract,
    batch: PredictionBatch,
    settings: Settings,
    now: datetime,
) -> PredictionsAccepted:
    """Write a validated batch: new rows, bucket statistics, waiting labels joined; one commit."""
    _check_retention_horizon(session, batch.ts)
    stored = row_bytes(batch.inputs)
    cohort_of, distinct = distinct_cohorts(batch.cohorts)
    cohort_json = [canonical_cohort(c) for c in distinct]
    keep, repeats = dedupe_batch(batch, list(zip(batch.ts, cohort_of, stored, strict=True)))

    used = sorted({cohort_of[i] for i in keep})
    capped = admit_cohorts(session, model, [distinct[k] for k in used], settings)
    # Distinct cohorts share their capped form when values beyond the caps fold into OTHER.
    by_capped: dict[tuple[tuple[str, str], ...], tuple[list[str], str]] = {}
    slices: dict[int, list[str]] = {}
    slices_json: dict[int, str] = {}
    for k, cohort in zip(used, capped, strict=True):
        key = tuple(sorted(cohort.items()))
        if key not in by_capped:
            listed = slices_of(cohort)
            by_capped[key] = listed, json.dumps(listed, separators=(",", ":"))
        slices[k], slices_json[k] = by_capped[key]
    # In key order: concurrent batches with overlapping ids then wait on each other in the
    # same order instead of deadlocking, and the primary-key index is walked in order.
    order = sorted(keep, key=batch.ids.__getitem__)
    columns = PredictionColumns(
        ids=[batch.ids[i] for i in order],
        ts=[batch.ts[i] for i in order],
        cohorts=[cohort_json[cohort_of[i]] for i in order],
        slices=[slices_json[cohort_of[i]] for i in order],
        inputs=np.ascontiguousarray(batch.inputs[order], dtype="<f8"),
    )
    inserted, conflicts = prediction_store.insert_predictions(
        session, model, contract.id, columns, now
    )
    if conflicts:
        raise Conflict(
            "predictions with these ids are already stored with different content; nothing from "
            "this batch was written",
            [
                ErrorDetail(
                    f"predictions[{batch.ids.index(i)}].id",
                    f"id {i!r} conflicts",
                    batch.ids.index(i),
                )
                for i in conflicts
            ],
        )
    waiting, discarded = _judge_waiting(
        session,
        model,
        prediction_store.join_waiting_labels(session, model, inserted),
        contract.spec.classes,
    )
    picked = [i for i in keep if batch.ids[i] in inserted]
    if picked:
        labels = np.array(
            [waiting.get(batch.ids[i], -1) for i in picked],
            dtype=np.int64,
        )
        deltas = bucket_deltas(
            contract,
            seconds=epoch_seconds([batch.ts[i] for i in picked]),
            slices=[slices[cohort_of[i]] for i in picked],
            inputs=batch.inputs[picked],
            labels=labels,
            new=True,
        )
        apply_deltas(session, model, deltas)
    session.commit()
    PREDICTIONS_INGESTED.labels(model).inc(len(inserted))
    return PredictionsAccepted(
        model=model,
        accepted=len(inserted),
        duplicates=repeats + len(keep) - len(inserted),
        contract_id=contract.id,
        joined_pending_labels=len(waiting),
        discarded_pending_labels=discarded,
    )


def _judge_waiting(
    session: Session, model: str, waiting: Mapping[str, SentLabel], classes: Sequence[str]
) -> tuple[dict[str, int], int]:
    """Read the waiting labels just met by predictions of a contract of ``classes``: returns
    ``{id: class index}`` of those it knows, and how many it does not (deleted)."""
    judged = {ident: class_index(label, classes) for ident, label in waiting.items()}
    unknown = sorted(ident for ident, index in judged.items() if index is None)
    prediction_store.discard_labels(session, model, unknown)
    known = {ident: index for ident, index in judged.items() if index is not None}
    prediction_store.set_label_indices(
        session, model, [(i, k) for i, k in sorted(known.items()) if k != waiting[i].index]
    )
    if unknown:
        PENDING_LABELS_DISCARDED.labels(model).inc(len(unknown))
    return known, len(unknown)


def ingest_labels(
    db: Database,
    session: Session,
    sent: SentBatch,
    settings: Settings,
    now: datetime,
) -> LabelsApplied:
    """Join labels to their predictions; keep early ones pending; report duplicates/conflicts.

    A label is read by the classes of the contract its prediction is bound to: one that
    contract does not have refuses the batch (422 naming the item), nothing written. A label
    waiting for its prediction needs only to be a class of some version of the model; it is
    judged when its prediction arrives (``ingest_predictions``).

    The model's contract versions are read, and the rows validated, in a read session of
    ``db``, as for ``ingest_predictions``: the write transaction on ``session`` begins after
    them."""
    with db.read_session() as reading:
        _model_or_404(reading, sent.model)
        versions = {v.id: v for v in contracts_store.model_classes(reading, sent.model)}
    index_of, n_classes = known_labels([v.classes for v in versions.values()])
    batch = sent.labels(index_of=index_of, n_classes=n_classes, now=now)
    return _store_labels(session, sent.model, versions, batch, settings, now)


def _store_labels(
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
    _count_joined(session, model, joined, now)
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
    return f"class name {ascii(label.name)[1:-1][:64]!r}"


def _shown_id(ident: str) -> str:
    return repr(ascii(ident)[1:-1][:64])


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


def _count_joined(session: Session, model: str, joined: LabeledRows, now: datetime | None) -> None:
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


def sweep_waiting_labels(session: Session, model: str) -> int:
    """Join labels left waiting though their prediction is stored (a concurrent-write race),
    each read by its prediction's contract (a label that contract has no class for is deleted
    and counted in ``calmon_pending_labels_discarded``); returns how many were joined."""
    joined = prediction_store.sweep_waiting_labels(session, model)
    versions = {v.id: v for v in contracts_store.model_classes(session, model)}
    keep: list[int] = []
    for contract_id in sorted(set(joined.contract_ids)):
        rows = [r for r, c in enumerate(joined.contract_ids) if c == contract_id]
        classes = versions[contract_id].classes
        known, _ = _judge_waiting(
            session,
            model,
            {joined.ids[r]: SentLabel(int(joined.labels[r]), joined.names[r]) for r in rows},
            classes,
        )
        for r in rows:
            if joined.ids[r] in known:
                joined.labels[r] = known[joined.ids[r]]
                keep.append(r)
    joined = joined.take(sorted(keep))
    _count_joined(session, model, joined, None)
    session.commit()
    return len(joined.ids)
