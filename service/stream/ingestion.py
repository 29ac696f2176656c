"""Use cases of the production stream: store predictions, join labels, keep buckets current.

Each call validates the whole batch first, then writes everything in one transaction and commits
once, so an acknowledged batch is fully visible to readings and a rejected one leaves no trace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy.orm import Session

from service.common.errors import (
    Conflict,
    ErrorDetail,
    NoActiveContract,
    NotFound,
    ValidationFailed,
)
from service.common.json_text import JsonText
from service.config import Settings
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.contracts.service import current_contract
from service.stream import prediction_store
from service.stream.arrow_batches import labels_from_arrow, predictions_from_arrow
from service.stream.batches import (
    MAX_BATCH_ITEMS,
    LabelBatch,
    PredictionBatch,
    parse_envelope,
    parse_labels,
    parse_predictions,
)
from service.stream.bucket_store import BucketDelta, BucketKey, apply_deltas
from service.stream.bucketing import (
    bucket_deltas,
    epoch_seconds,
    merge_deltas,
    parsed_slices,
    stored_inputs,
)
from service.stream.cohorts import admit_cohorts, slices_of
from service.stream.idempotency import (
    canonical_cohort,
    dedupe_batch,
    distinct_cohorts,
    row_bytes,
)
from service.stream.instruments import PENDING_LABELS_REJECTED
from service.stream.retention_store import retention_horizon


@dataclass(frozen=True)
class PredictionsAccepted:
    model: str
    accepted: int
    duplicates: int
    contract_id: str
    joined_pending: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "contract_id": self.contract_id,
            "joined_pending_labels": self.joined_pending,
        }


@dataclass
class LabelsApplied:
    model: str
    joined: int = 0
    pending: int = 0
    duplicates: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    delays_seconds: list[float] = field(default_factory=list)
    rejected_pending: list[str] = field(default_factory=list)

    def compare(self, ident: str, label: int, earlier: int, reason: str) -> None:
        """Count a label met again: a duplicate if it agrees, else a conflict (not applied)."""
        if label == earlier:
            self.duplicates += 1
        else:
            self.conflicts.append(
                {"id": ident, "label": label, "stored_label": earlier, "reason": reason}
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "joined": self.joined,
            "pending": self.pending,
            "duplicates": self.duplicates,
            "conflicts": self.conflicts,
            "rejected_pending": len(self.rejected_pending),
            "rejected_pending_ids": self.rejected_pending,
        }


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
    session: Session,
    body: Mapping[str, Any],
    settings: Settings,
    now: datetime,
    text: JsonText | None = None,
) -> PredictionsAccepted:
    """Store a batch of predictions idempotently and join any labels that were waiting.

    ``text`` is the JSON text ``body`` was decoded from, if any, held to the rule that no object
    repeats a key (``service.common.json_text``) before anything is written."""
    envelope = parse_envelope(body, "predictions", MAX_BATCH_ITEMS, text)
    _model_or_404(session, envelope.model)
    contract = _binding_contract(session, envelope.model, envelope.contract_id, now)
    spec = contract.spec
    batch = parse_predictions(
        envelope.items, task=spec.task, n_classes=len(spec.classes), now=now, text=envelope.text
    )
    return _store_predictions(session, envelope.model, contract, batch, settings, now)


def ingest_arrow_predictions(
    session: Session,
    model: str | None,
    contract_id: str | None,
    table: pa.Table,
    settings: Settings,
    now: datetime,
) -> PredictionsAccepted:
    """``ingest_predictions`` for a batch sent as Arrow columns (``arrow_batches``): the model
    and the optional contract id checked by the envelope's rules, the rows by the items'."""
    envelope = parse_envelope(_envelope_of(model, contract_id, "predictions"), "predictions")
    _model_or_404(session, envelope.model)
    contract = _binding_contract(session, envelope.model, envelope.contract_id, now)
    spec = contract.spec
    batch = predictions_from_arrow(table, task=spec.task, n_classes=len(spec.classes), now=now)
    return _store_predictions(session, envelope.model, contract, batch, settings, now)


def _envelope_of(model: str | None, contract_id: str | None, items_key: str) -> dict[str, Any]:
    """The JSON envelope an Arrow body's query parameters stand for (its items checked apart)."""
    body: dict[str, Any] = {items_key: [None]}
    if model is not None:
        body["model"] = model
    if contract_id is not None:
        body["contract_id"] = contract_id
    return body


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
    slices = {k: slices_of(c) for k, c in zip(used, capped, strict=True)}
    slices_json = {k: json.dumps(v, separators=(",", ":")) for k, v in slices.items()}
    rows = [
        (
            batch.ids[i],
            batch.ts[i],
            cohort_json[cohort_of[i]],
            slices_json[cohort_of[i]],
            stored[i],
        )
        # In key order: concurrent batches with overlapping ids then wait on each other in the
        # same order instead of deadlocking, and the primary-key index is walked in order.
        for i in sorted(keep, key=batch.ids.__getitem__)
    ]
    inserted, conflicts = prediction_store.insert_predictions(
        session, model, contract.id, rows, now
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
    waiting = prediction_store.join_waiting_labels(session, model, inserted)
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
    return PredictionsAccepted(
        model=model,
        accepted=len(inserted),
        duplicates=repeats + len(keep) - len(inserted),
        contract_id=contract.id,
        joined_pending=len(waiting),
    )


def ingest_labels(
    session: Session,
    body: Mapping[str, Any],
    settings: Settings,
    now: datetime,
    text: JsonText | None = None,
) -> LabelsApplied:
    """Join labels to their predictions; keep early ones pending; report duplicates/conflicts.

    ``text``: as for ``ingest_predictions``."""
    envelope = parse_envelope(body, "labels", MAX_BATCH_ITEMS, text)
    _model_or_404(session, envelope.model)
    batch = parse_labels(
        envelope.items,
        classes=current_contract(session, envelope.model, now).spec.classes,
        now=now,
        text=envelope.text,
    )
    return _store_labels(session, envelope.model, batch, settings, now)


def ingest_arrow_labels(
    session: Session, model: str | None, table: pa.Table, settings: Settings, now: datetime
) -> LabelsApplied:
    """``ingest_labels`` for a batch sent as Arrow columns (``arrow_batches``)."""
    envelope = parse_envelope(_envelope_of(model, None, "labels"), "labels")
    _model_or_404(session, envelope.model)
    classes = current_contract(session, envelope.model, now).spec.classes
    batch = labels_from_arrow(table, classes=classes, now=now)
    return _store_labels(session, envelope.model, batch, settings, now)


def _store_labels(
    session: Session, model: str, batch: LabelBatch, settings: Settings, now: datetime
) -> LabelsApplied:
    """Join validated labels, keep early ones waiting, count repeats; one commit."""
    result = LabelsApplied(model=model)
    first_label = dict(zip(batch.ids, batch.labels, strict=True))
    for ident, label in batch.repeats:
        result.compare(ident, label, first_label[ident], "repeated in the batch")
    # In key order, the primary-key probes and inserts walk the indexes in order.
    staged = sorted(zip(batch.ids, batch.labels, batch.ts, strict=True))
    joined, waiting, stored = prediction_store.record_labels(session, model, staged, now)
    result.rejected_pending = _cap_waiting(session, model, waiting, settings)
    result.pending = len(waiting) - len(result.rejected_pending)
    for ident, label, _ in staged:
        if ident in stored:
            result.compare(ident, label, stored[ident], "a different label was received before")
    result.joined = len(joined.ids)
    result.delays_seconds = (joined.label_seconds - joined.seconds).astype(float).tolist()
    _count_joined(session, model, joined)
    session.commit()
    if result.rejected_pending:
        PENDING_LABELS_REJECTED.labels(model).inc(len(result.rejected_pending))
    return result


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


def _count_joined(session: Session, model: str, joined: prediction_store.JoinedLabels) -> None:
    """Move just-joined labeled predictions from the unlabeled sums into the statistics."""
    deltas: dict[BucketKey, BucketDelta] = {}
    contract_of = np.array(joined.contract_ids, dtype=object)
    for contract_id in sorted(set(joined.contract_ids)):
        contract = contracts_store.get_contract(session, contract_id)
        assert contract is not None
        rows = np.flatnonzero(contract_of == contract_id)
        merge_deltas(
            deltas,
            bucket_deltas(
                contract,
                seconds=joined.seconds[rows],
                slices=parsed_slices([joined.slices[r] for r in rows]),
                inputs=stored_inputs(contract, [joined.inputs[r] for r in rows]),
                labels=joined.labels[rows],
                new=False,
            ),
        )
    apply_deltas(session, model, deltas)


def sweep_waiting_labels(session: Session, model: str) -> int:
    """Join labels left waiting though their prediction is stored (a concurrent-write race)."""
    joined = prediction_store.sweep_waiting_labels(session, model)
    _count_joined(session, model, joined)
    session.commit()
    return len(joined.ids)
