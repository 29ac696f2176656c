"""Use cases of the production stream: store predictions, join labels, keep buckets current.

Each call validates the whole batch first, then writes everything in one transaction and commits
once, so an acknowledged batch is fully visible to readings and a rejected one leaves no trace.
A prediction batch is written here; a label batch is applied by ``label_join``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from service.common.errors import (
    Conflict,
    ErrorDetail,
    NoActiveContract,
    NotFound,
    ValidationFailed,
)
from service.config import Settings
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.db.database import Database
from service.stream import prediction_store
from service.stream.bucket_store import apply_deltas
from service.stream.bucketing import bucket_deltas, epoch_seconds
from service.stream.cohorts import admit_cohorts, slices_of
from service.stream.column_checks import PredictionBatch
from service.stream.idempotency import (
    canonical_cohort,
    dedupe_batch,
    distinct_cohorts,
    row_bytes,
)
from service.stream.instruments import (
    PENDING_LABELS_DISCARDED,
    PREDICTIONS_INGESTED,
)
from service.stream.label_classes import SentLabel, class_index, known_labels
from service.stream.label_join import LabelsApplied, count_joined, store_labels
from service.stream.retention_store import retention_horizon
from service.stream.sent_batches import SentBatch
from service.stream.sql.columns import PredictionColumns


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
    return store_labels(session, sent.model, versions, batch, settings, now)


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
    count_joined(session, model, joined, None)
    session.commit()
    return len(joined.ids)
