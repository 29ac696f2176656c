"""Predictions and labels: idempotent bulk insert, label join, pending labels."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select, text
from sqlalchemy.orm import Session

from service.db.models import LabelRecord, PredictionRecord
from service.stream.label_classes import SentLabel
from service.stream.sql import for_session, staging
from service.stream.sql.columns import LabeledRows, PredictionColumns

#: A label still waiting for its prediction, in the words of the partial index
#: ``ix_labels_waiting`` (``NOT joined``): neither planner matches the index to the forms
#: SQLAlchemy writes for a false boolean (``joined IS false``, SQLite's ``joined = 0``).
_WAITING = text("NOT labels.joined")

#: A validated label ready to store: (id, class index, class name as sent or None, ts); the
#: index of a label sent by name is provisional (``LabelRecord``).
StagedLabel = tuple[str, int, str | None, datetime]


def insert_predictions(
    session: Session, model: str, contract_id: str, columns: PredictionColumns, now: datetime
) -> tuple[set[str], list[str]]:
    """Insert new predictions (``columns``, in id order), skipping ids already stored.

    Returns ``(inserted ids, conflicting ids)``: a conflicting id is stored with other content
    (the caller rolls back). Ids stored with the same content are neither: duplicates. The
    content is compared in SQL, stored row against staged row: the event time, the cohort's JSON
    text (the service writes its canonical form, kept verbatim by ``json`` on PostgreSQL and by
    SQLite's text) and the raw bytes of ``inputs``. Up to 20 conflicting ids are returned.
    """
    sql = for_session(session)
    params = {"model": model, "contract_id": contract_id, "now": now}
    if sql.insert_new_predictions(session, params, columns):
        return set(columns.ids), []
    rows = columns.rows()
    staging.load(session, "stage_predictions", rows)
    inserted = sql.insert_staged_predictions(session, params)
    conflicts: list[str] = []
    if len(inserted) < len(rows):
        conflicts = list(
            session.scalars(
                text(
                    "SELECT s.id FROM stage_predictions s WHERE EXISTS (SELECT 1 FROM"
                    " predictions p WHERE p.model = :model AND p.id = s.id AND (p.ts <> s.ts"
                    " OR CAST(p.cohort AS TEXT) <> s.cohort OR p.inputs <> s.inputs)"
                    f"{sql.probe_fence}) ORDER BY s.id LIMIT 20"
                ),
                {"model": model},
            )
        )
    return inserted, conflicts


def join_waiting_labels(session: Session, model: str, ids: set[str]) -> dict[str, SentLabel]:
    """Mark as joined the waiting labels of the just-inserted predictions ``ids``.

    Returns ``{id: label as sent}`` (for the caller to judge by the predictions' contract);
    nothing to do, and one probe of the partial index, when no label
    of ``model`` waits. Looks only at the staged predictions of this batch, matched with the
    waiting labels by a join whose cost grows with the sum of the two, never their product
    (``Backend.linear_joins``): the planner's estimate of how many labels wait is often far off
    (a burst of early labels, a table not analysed since), and a nested loop over a mistaken
    handful of waiting labels would compare each of them with every staged id.
    """
    if not ids or not session.scalar(
        select(select(LabelRecord.id).where(LabelRecord.model == model, _WAITING).exists())
    ):
        return {}
    rows = for_session(session).claim_waiting_labels(session, model, sorted(ids))
    waiting = {row[0]: SentLabel(int(row[1]), row[2]) for row in rows}
    stray = set(waiting) - ids
    if stray:
        session.execute(
            text("UPDATE labels SET joined = false WHERE model = :model AND id = :id"),
            [{"model": model, "id": i} for i in sorted(stray)],
        )
    return {i: lab for i, lab in waiting.items() if i in ids}


def record_labels(
    session: Session, model: str, labels: Sequence[StagedLabel], now: datetime
) -> tuple[LabeledRows, list[str], dict[str, SentLabel]]:
    """Store new labels; join those whose prediction is stored.

    Returns ``(joined, ids of the new labels left waiting for their prediction (sorted),
    {id: label stored before, as sent})``; the last covers ids that had a label already
    (duplicates or conflicts, never overwritten). The joined labels (with their own event
    times) are not judged here: the caller reads them by their predictions' contracts
    (``set_label_indices``).
    """
    staging.load(session, "stage_labels", labels)
    joined, waiting = for_session(session).record_staged_labels(
        session, {"model": model, "now": now}
    )
    stored: dict[str, SentLabel] = {}
    if len(joined) + len(waiting) < len(labels):
        fresh_ids = {*joined.ids, *waiting}
        stored = {
            row[0]: SentLabel(int(row[1]), row[2])
            for row in session.execute(
                text(
                    "SELECT s.id, l.label, l.label_name FROM stage_labels s JOIN labels l"
                    " ON l.model = :model AND l.id = s.id"
                ),
                {"model": model},
            )
            if row[0] not in fresh_ids
        }
    return joined, sorted(waiting), stored


def set_label_indices(session: Session, model: str, indices: Sequence[tuple[str, int]]) -> None:
    """Store the class indices ``(id, index)`` of labels of ``model`` as judged by their
    predictions' contracts."""
    if indices:
        session.execute(
            text("UPDATE labels SET label = :label WHERE model = :model AND id = :id"),
            [{"model": model, "id": i, "label": k} for i, k in indices],
        )


def discard_labels(session: Session, model: str, ids: Sequence[str]) -> None:
    """Delete the labels ``ids`` of ``model`` (labels just met by a prediction whose contract
    has no class of that name or index)."""
    if ids:
        session.execute(
            delete(LabelRecord).where(LabelRecord.model == model, LabelRecord.id.in_(ids))
        )


def prediction_contracts(session: Session, model: str, ids: Sequence[str]) -> dict[str, str]:
    """``{id: contract id}`` of the stored predictions among ``ids`` of ``model``."""
    found: dict[str, str] = {}
    for start in range(0, len(ids), 1000):
        query = select(PredictionRecord.id, PredictionRecord.contract_id).where(
            PredictionRecord.model == model, PredictionRecord.id.in_(ids[start : start + 1000])
        )
        found.update((row[0], row[1]) for row in session.execute(query))
    return found


def count_waiting_labels(session: Session, model: str) -> int:
    """How many labels of ``model`` wait for their prediction (through their partial index)."""
    waiting = select(func.count()).where(LabelRecord.model == model, _WAITING)
    return int(session.scalar(waiting) or 0)


def waiting_label_counts(session: Session, models: Sequence[str]) -> dict[str, int]:
    """How many labels of each of ``models`` wait for their prediction (models without any are
    absent), in one statement through the partial index."""
    query = (
        select(LabelRecord.model, func.count())
        .where(LabelRecord.model.in_(list(models)), _WAITING)
        .group_by(LabelRecord.model)
    )
    return {model: int(n) for model, n in session.execute(query)}


def models_with_waiting_labels(session: Session) -> list[str]:
    """Every model with labels waiting for their prediction, sorted (one walk of the partial
    index ``ix_labels_waiting``, whatever the number of models)."""
    query = select(LabelRecord.model).where(_WAITING).distinct().order_by(LabelRecord.model)
    return list(session.scalars(query))


def delete_waiting_labels(session: Session, model: str, ids: Sequence[str]) -> None:
    """Remove waiting labels ``ids`` of ``model`` (labels this transaction has just stored)."""
    if ids:
        session.execute(
            delete(LabelRecord).where(
                LabelRecord.model == model,
                LabelRecord.id.in_(ids),
                _WAITING,
            )
        )


def expire_waiting_labels(session: Session, model: str, received_before: datetime) -> int:
    """Delete the labels of ``model`` still waiting for their prediction that were received
    before ``received_before``; returns how many."""
    result = session.execute(
        delete(LabelRecord).where(
            LabelRecord.model == model,
            _WAITING,
            LabelRecord.received_at < received_before,
        )
    )
    return int(cast(CursorResult[Any], result).rowcount)


def sweep_waiting_labels(session: Session, model: str) -> LabeledRows:
    """Join waiting labels whose prediction is stored after all.

    Only a label written at the same moment as its prediction by a concurrent transaction can be
    left waiting with its prediction present; the refresher runs this for every model. Reads the
    waiting labels through their partial index, so it costs little while few labels wait.
    """
    found = for_session(session).waiting_labels_with_predictions(session, model)
    if len(found):
        session.execute(
            text("UPDATE labels SET joined = true WHERE model = :model AND id = :id"),
            [{"model": model, "id": i} for i in found.ids],
        )
    return found


def predictions_page(session: Session, model: str, after: str | None, limit: int) -> LabeledRows:
    """Up to ``limit`` predictions of ``model`` with ids after ``after`` in id order, with their
    joined labels (-1: none): a keyset walk of the primary key ``(model, id)``."""
    where = "p.model = :model"
    params: dict[str, Any] = {"model": model, "limit": limit}
    if after is not None:
        where += " AND p.id > :after"
        params["after"] = after
    seconds = for_session(session).epoch_seconds("p.ts")
    query = text(
        f"SELECT p.id, p.contract_id, {seconds}, p.slices, p.inputs,"
        " COALESCE(l.label, -1), NULL FROM predictions p LEFT JOIN labels l ON"
        f" l.model = p.model AND l.id = p.id AND l.joined WHERE {where} ORDER BY p.id"
        " LIMIT :limit"
    )
    return LabeledRows.of_rows(session.execute(query, params).all())
