"""Predictions and labels: idempotent bulk insert, label join, pending labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session

from service.storage import staging
from service.storage.models import PendingLabel, PredictionRecord, table_of
from service.storage.types import UTCDateTime

_TS = UTCDateTime()


def _on_conflict_select(session: Session) -> str:
    """SQLite needs a WHERE before ON CONFLICT in INSERT ... SELECT (a parser ambiguity)."""
    return "" if session.get_bind().dialect.name == "postgresql" else "WHERE true"


@dataclass(frozen=True)
class StagedPrediction:
    """One validated prediction ready to store (``inputs`` packed float64, ``digest`` SHA-256)."""

    id: str
    ts: datetime
    cohort_json: str
    slices: str
    inputs: bytes
    digest: bytes


@dataclass(frozen=True)
class JoinedLabel:
    """A prediction whose label was just recorded, with what the statistics need."""

    id: str
    contract_id: str
    ts: datetime
    slices: str
    inputs: bytes
    label: int
    label_ts: datetime


def insert_predictions(
    session: Session, model: str, contract_id: str, rows: Sequence[StagedPrediction], now: datetime
) -> tuple[set[str], list[str]]:
    """Insert new predictions, skipping ids already stored.

    Returns ``(inserted ids, conflicting ids)``: a conflicting id is stored with other content
    (the caller rolls back). Ids stored with the same content are neither: duplicates.
    """
    staging.load(
        session,
        "stage_predictions",
        ((r.id, r.ts, r.cohort_json, r.slices, r.inputs, r.digest) for r in rows),
    )
    inserted = set(
        session.scalars(
            text(
                "INSERT INTO predictions (model, id, contract_id, ts, cohort, slices, inputs,"
                " digest, received_at) SELECT :model, id, :contract_id, ts, cohort, slices,"
                f" inputs, digest, :now FROM stage_predictions {_on_conflict_select(session)}"
                " ON CONFLICT (model, id) DO NOTHING RETURNING id"
            ).bindparams(bindparam("now", type_=_TS)),
            {"model": model, "contract_id": contract_id, "now": now},
        )
    )
    conflicts: list[str] = []
    if len(inserted) < len(rows):
        conflicts = list(
            session.scalars(
                text(
                    "SELECT s.id FROM stage_predictions s JOIN predictions p"
                    " ON p.model = :model AND p.id = s.id WHERE p.digest <> s.digest"
                    " ORDER BY s.id LIMIT 20"
                ),
                {"model": model},
            )
        )
    return inserted, conflicts


def take_pending_labels(session: Session, model: str) -> dict[str, tuple[int, datetime]]:
    """Remove and return pending labels of the predictions just staged: ``{id: (label, ts)}``."""
    rows = session.execute(
        text(
            "DELETE FROM pending_labels WHERE model = :model"
            " AND id IN (SELECT id FROM stage_predictions) RETURNING id, label, ts"
        ).columns(ts=_TS),
        {"model": model},
    )
    return {row.id: (int(row.label), row.ts) for row in rows}


def set_labels(session: Session, model: str, labels: dict[str, tuple[int, datetime]]) -> None:
    """Record labels on stored predictions (the pending labels joined at ingest)."""
    if not labels:
        return
    session.execute(
        text(
            "UPDATE predictions SET label = :label, label_ts = :ts"
            " WHERE model = :model AND id = :id"
        ).bindparams(bindparam("ts", type_=_TS)),
        [{"model": model, "id": i, "label": lab, "ts": ts} for i, (lab, ts) in labels.items()],
    )


def join_labels(
    session: Session, model: str, labels: Sequence[tuple[str, int, datetime]]
) -> tuple[list[JoinedLabel], dict[str, int], list[tuple[str, int, datetime]]]:
    """Apply labels to unlabeled stored predictions.

    Returns ``(joined, already labeled {id: stored label}, without prediction [(id, label, ts)])``.
    """
    staging.load(session, "stage_labels", labels)
    joined = [
        JoinedLabel(r.id, r.contract_id, r.ts, r.slices, r.inputs, int(r.label), r.label_ts)
        for r in session.execute(
            text(
                "UPDATE predictions SET label = s.label, label_ts = s.ts FROM stage_labels s"
                " WHERE predictions.model = :model AND predictions.id = s.id"
                " AND predictions.label IS NULL"
                " RETURNING predictions.id, predictions.contract_id, predictions.ts,"
                " predictions.slices, predictions.inputs, predictions.label,"
                " predictions.label_ts"
            ).columns(ts=_TS, label_ts=_TS),
            {"model": model},
        )
    ]
    joined_ids = {j.id for j in joined}
    stored = {
        row.id: int(row.label)
        for row in session.execute(
            text(
                "SELECT p.id, p.label FROM stage_labels s JOIN predictions p"
                " ON p.model = :model AND p.id = s.id"
            ),
            {"model": model},
        )
        if row.id not in joined_ids
    }
    orphans = [lab for lab in labels if lab[0] not in joined_ids and lab[0] not in stored]
    return joined, stored, orphans


def add_pending_labels(
    session: Session, model: str, labels: Sequence[tuple[str, int, datetime]], now: datetime
) -> tuple[set[str], dict[str, int]]:
    """Keep labels whose prediction has not arrived. Returns ``(new ids, {id: label already
    pending})`` for the ones that were pending before."""
    if not labels:
        return set(), {}
    ids = [lab[0] for lab in labels]
    existing = {
        row.id: int(row.label)
        for row in session.execute(
            select(PendingLabel.id, PendingLabel.label).where(
                PendingLabel.model == model, PendingLabel.id.in_(ids)
            )
        )
    }
    fresh = [lab for lab in labels if lab[0] not in existing]
    if fresh:
        session.execute(
            table_of(PendingLabel).insert(),
            [
                {"model": model, "id": i, "label": lab, "ts": ts, "received_at": now}
                for i, lab, ts in fresh
            ],
        )
    return {lab[0] for lab in fresh}, existing


def labeled_sample(
    session: Session, model: str, contract_id: str, start: datetime, end: datetime, limit: int
) -> list[tuple[bytes, int]]:
    """The newest ``limit`` labeled predictions of a contract in ``[start, end)``.

    Returns ``(inputs, label)`` pairs.
    """
    rows = session.execute(
        select(PredictionRecord.inputs, PredictionRecord.label)
        .where(
            PredictionRecord.model == model,
            PredictionRecord.contract_id == contract_id,
            PredictionRecord.ts >= start,
            PredictionRecord.ts < end,
            PredictionRecord.label.is_not(None),
        )
        .order_by(PredictionRecord.ts.desc())
        .limit(limit)
    )
    return [(row.inputs, int(row.label)) for row in rows]
