"""Predictions and labels: idempotent bulk insert, label join, pending labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import numpy as np
from sqlalchemy import CursorResult, bindparam, text
from sqlalchemy.orm import Session

from service.db import staging
from service.db.types import UTCDateTime

_TS = UTCDateTime()


def _on_conflict_select(session: Session) -> str:
    """SQLite needs a WHERE before ON CONFLICT in INSERT ... SELECT (a parser ambiguity)."""
    return "" if session.get_bind().dialect.name == "postgresql" else "WHERE true"


def _fence(session: Session) -> str:
    """``OFFSET 0`` on PostgreSQL: keeps a correlated subquery a per-row primary-key probe.

    Flattened into a join, a planner with stale statistics may hash the whole table instead.
    SQLite always probes (and does not accept OFFSET without LIMIT).
    """
    return " OFFSET 0" if session.get_bind().dialect.name == "postgresql" else ""


def _json_cast(session: Session, column: str) -> str:
    """Staged JSON arrives as text; PostgreSQL's json column wants it cast."""
    return f"{column}::json" if session.get_bind().dialect.name == "postgresql" else column


#: A validated prediction ready to store: (id, ts, cohort JSON, slices JSON, inputs, digest);
#: ``inputs`` are the packed float64 bytes, ``digest`` the SHA-256 of the content.
StagedPrediction = tuple[str, datetime, str, str, bytes, bytes]


@dataclass(frozen=True)
class JoinedLabels:
    """Predictions whose labels were just recorded, column by column (R rows).

    ``seconds`` and ``label_seconds`` are whole seconds since the epoch of the prediction's event
    time and of the label's; ``inputs`` the stored raw bytes; ``slices`` the stored JSON lists.
    """

    ids: list[str]
    contract_ids: list[str]
    seconds: np.ndarray
    label_seconds: np.ndarray
    slices: list[str]
    inputs: list[bytes]
    labels: np.ndarray


#: SQLite: a prediction joined to its key (``k``) by the full primary key.
_PAYLOAD_OF_KEY = "JOIN predictions p ON p.model = k.model AND p.ts = k.ts AND p.id = k.id"


def _prediction_by_id(
    id_sql: str, columns: str, key_filter: str = "", payload_filter: str = ""
) -> str:
    """PostgreSQL: a subquery for the prediction of ``:model`` whose id is ``id_sql``.

    The key is probed first; its event time then reaches the partitioned table as a run-time
    parameter, so exactly one daily partition is probed, by its full primary key. Both probes
    are fenced (``OFFSET 0``) so the planner cannot flatten them into a scan of every partition.
    ``key_filter`` and ``payload_filter`` are extra conditions (starting with AND) on the key and on
    the prediction; ``columns`` are prediction columns, unqualified.
    """
    return (
        f"SELECT p.* FROM (SELECT ts FROM prediction_keys WHERE model = :model AND id = {id_sql}"
        f"{key_filter} OFFSET 0) k CROSS JOIN LATERAL (SELECT {columns} FROM predictions"
        f" WHERE model = :model AND ts = k.ts AND id = {id_sql}{payload_filter} OFFSET 0) p"
    )


def _epoch(session: Session, column: str) -> str:
    """SQL for a timestamp column as whole seconds since the epoch (floor), per dialect."""
    if session.get_bind().dialect.name == "postgresql":
        return f"floor(extract(epoch from {column}))::bigint"
    return f"CAST(strftime('%s', {column}) AS INTEGER)"


def insert_predictions(
    session: Session, model: str, contract_id: str, rows: Sequence[StagedPrediction], now: datetime
) -> tuple[set[str], list[str]]:
    """Insert new predictions, skipping ids already stored.

    Returns ``(inserted ids, conflicting ids)``: a conflicting id is stored with other content
    (the caller rolls back). Ids stored with the same content are neither: duplicates.
    """
    staging.load(session, "stage_predictions", rows)
    params = {"model": model, "contract_id": contract_id, "now": now}
    new_keys = (
        "INSERT INTO prediction_keys (model, id, ts, digest) SELECT :model, id, ts, digest"
        f" FROM stage_predictions {_on_conflict_select(session)}"
        " ON CONFLICT (model, id) DO NOTHING RETURNING id"
    )
    payload = (
        "INSERT INTO predictions (model, ts, id, contract_id, cohort, slices, inputs, received_at)"
        f" SELECT :model, s.ts, s.id, :contract_id, {_json_cast(session, 's.cohort')}, s.slices,"
        " s.inputs, :now FROM stage_predictions s"
    )
    bind_now = bindparam("now", type_=_TS)
    if session.get_bind().dialect.name == "postgresql":
        statement = f"WITH k AS ({new_keys}) {payload} JOIN k ON k.id = s.id RETURNING id"
        inserted = set(session.execute(text(statement).bindparams(bind_now), params).scalars())
    else:
        inserted = set(session.execute(text(new_keys), params).scalars())
        if inserted:
            session.execute(
                text(
                    f"{payload} WHERE EXISTS (SELECT 1 FROM prediction_keys k WHERE"
                    " k.model = :model AND k.id = s.id AND k.digest = s.digest)"
                    " ON CONFLICT (model, ts, id) DO NOTHING"
                ).bindparams(bind_now),
                params,
            )
    conflicts: list[str] = []
    if len(inserted) < len(rows):
        conflicts = list(
            session.scalars(
                text(
                    "SELECT s.id FROM stage_predictions s WHERE EXISTS (SELECT 1 FROM"
                    " prediction_keys k WHERE k.model = :model AND k.id = s.id"
                    f" AND k.digest <> s.digest{_fence(session)}) ORDER BY s.id LIMIT 20"
                ),
                {"model": model},
            )
        )
    return inserted, conflicts


def join_waiting_labels(session: Session, model: str, ids: set[str]) -> dict[str, int]:
    """Mark as joined the waiting labels of the just-inserted predictions ``ids``.

    Returns ``{id: label}``. Looks only at the staged predictions of this batch.
    """
    if not ids:
        return {}
    rows = session.execute(
        text(
            "UPDATE labels SET joined = true WHERE model = :model AND NOT joined"
            " AND id IN (SELECT id FROM stage_predictions) RETURNING id, label"
        ),
        {"model": model},
    ).all()
    waiting = {row[0]: int(row[1]) for row in rows}
    stray = set(waiting) - ids
    if stray:
        session.execute(
            text("UPDATE labels SET joined = false WHERE model = :model AND id = :id"),
            [{"model": model, "id": i} for i in sorted(stray)],
        )
    return {i: lab for i, lab in waiting.items() if i in ids}


def record_labels(
    session: Session, model: str, labels: Sequence[tuple[str, int, datetime]], now: datetime
) -> tuple[JoinedLabels, list[str], dict[str, int]]:
    """Store new labels; join those whose prediction is stored.

    Returns ``(joined, ids of the new labels left waiting for their prediction (sorted),
    {id: label stored before})``; the last covers ids that had a label already (duplicates or
    conflicts, never overwritten).
    """
    staging.load(session, "stage_labels", labels)
    exists = "EXISTS (SELECT 1 FROM prediction_keys k WHERE k.model = :model AND k.id = s.id)"
    insert = (  # SQLite only: its planner always probes the primary key
        "INSERT INTO labels (model, id, label, ts, received_at, joined)"
        f" SELECT CAST(:model AS VARCHAR), s.id, s.label, s.ts, :now, {exists}"
        " FROM stage_labels s"
        f" {_on_conflict_select(session)} ON CONFLICT (model, id) DO NOTHING"
    )
    params = {"model": model, "now": now}
    bind_now = bindparam("now", type_=_TS)
    columns = f"p.contract_id, {_epoch(session, 'p.ts')}, p.slices, p.inputs"
    rows: list[tuple[Any, ...]]
    if session.get_bind().dialect.name == "postgresql":
        rows = [
            tuple(r)
            for r in session.execute(
                text(
                    "WITH found AS (SELECT s.id, s.label, s.ts, p.contract_id, p.ts AS pts,"
                    " p.slices, p.inputs FROM stage_labels s LEFT JOIN LATERAL"
                    f" ({_prediction_by_id('s.id', 'contract_id, ts, slices, inputs')}) p"
                    " ON true),"
                    " ins AS (INSERT INTO labels (model, id, label, ts, received_at, joined)"
                    " SELECT :model, id, label, ts, :now, contract_id IS NOT NULL FROM found"
                    " ON CONFLICT (model, id) DO NOTHING RETURNING id)"
                    f" SELECT f.id, f.label, {_epoch(session, 'f.ts')},"
                    f" f.contract_id IS NOT NULL, f.contract_id, {_epoch(session, 'f.pts')},"
                    " f.slices, f.inputs FROM found f JOIN ins ON ins.id = f.id"
                ).bindparams(bind_now),
                params,
            )
        ]
    else:
        inserted = session.execute(
            text(f"{insert} RETURNING id, label, joined").bindparams(bind_now), params
        ).all()
        fresh = {row[0] for row in inserted}
        found = {
            row[0]: tuple(row)
            for row in session.execute(
                text(
                    f"SELECT s.id, {_epoch(session, 's.ts')}, {columns} FROM stage_labels s"
                    f" JOIN prediction_keys k ON k.model = :model AND k.id = s.id {_PAYLOAD_OF_KEY}"
                ),
                {"model": model},
            )
            if row[0] in fresh
        }
        rows = [
            (i, lab, found[i][1], joined, *found[i][2:]) if joined else (i, lab, None, joined)
            for i, lab, joined in inserted
        ]
    joined_rows = [r for r in rows if r[3]]
    cols: list[tuple[Any, ...]] = list(zip(*joined_rows, strict=True)) if joined_rows else [()] * 8
    joined = JoinedLabels(
        ids=list(cols[0]),
        contract_ids=list(cols[4]),
        seconds=np.array(cols[5], dtype=np.int64),
        label_seconds=np.array(cols[2], dtype=np.int64),
        slices=list(cols[6]),
        inputs=[bytes(b) for b in cols[7]],
        labels=np.array(cols[1], dtype=np.int64),
    )
    stored: dict[str, int] = {}
    if len(rows) < len(labels):
        fresh_ids = {r[0] for r in rows}
        stored = {
            row[0]: int(row[1])
            for row in session.execute(
                text(
                    "SELECT s.id, l.label FROM stage_labels s JOIN labels l"
                    " ON l.model = :model AND l.id = s.id"
                ),
                {"model": model},
            )
            if row[0] not in fresh_ids
        }
    return joined, sorted(r[0] for r in rows if not r[3]), stored


def count_waiting_labels(session: Session, model: str) -> int:
    """How many labels of ``model`` wait for their prediction (through their partial index)."""
    return int(
        session.scalar(
            text("SELECT count(*) FROM labels WHERE model = :model AND NOT joined"),
            {"model": model},
        )
        or 0
    )


def delete_waiting_labels(session: Session, model: str, ids: Sequence[str]) -> None:
    """Remove waiting labels ``ids`` of ``model`` (labels this transaction has just stored)."""
    if ids:
        session.execute(
            text("DELETE FROM labels WHERE model = :model AND id = :id AND NOT joined"),
            [{"model": model, "id": i} for i in ids],
        )


def expire_waiting_labels(session: Session, model: str, received_before: datetime) -> int:
    """Delete the labels of ``model`` still waiting for their prediction that were received
    before ``received_before``; returns how many."""
    result = session.execute(
        text(
            "DELETE FROM labels WHERE model = :model AND NOT joined AND received_at < :cutoff"
        ).bindparams(bindparam("cutoff", type_=_TS)),
        {"model": model, "cutoff": received_before},
    )
    return int(cast(CursorResult[Any], result).rowcount)


def sweep_waiting_labels(session: Session, model: str) -> JoinedLabels:
    """Join waiting labels whose prediction is stored after all.

    Only a label written at the same moment as its prediction by a concurrent transaction can be
    left waiting with its prediction present; the refresher runs this for every model. Reads the
    waiting labels through their partial index, so it costs little while few labels wait.
    """
    if session.get_bind().dialect.name == "postgresql":
        found = (
            f"CROSS JOIN LATERAL ({_prediction_by_id('l.id', 'contract_id, ts, slices, inputs')})"
            " p WHERE l.model = :model AND NOT l.joined FOR UPDATE OF l"
        )
    else:
        found = (
            f"JOIN prediction_keys k ON k.model = l.model AND k.id = l.id {_PAYLOAD_OF_KEY}"
            " WHERE l.model = :model AND NOT l.joined"
        )
    rows = [
        tuple(r)
        for r in session.execute(
            text(
                f"SELECT l.id, l.label, {_epoch(session, 'l.ts')}, p.contract_id,"
                f" {_epoch(session, 'p.ts')}, p.slices, p.inputs FROM labels l {found}"
            ),
            {"model": model},
        )
    ]
    if rows:
        session.execute(
            text("UPDATE labels SET joined = true WHERE model = :model AND id = :id"),
            [{"model": model, "id": r[0]} for r in rows],
        )
    cols: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [()] * 7
    return JoinedLabels(
        ids=list(cols[0]),
        contract_ids=list(cols[3]),
        seconds=np.array(cols[4], dtype=np.int64),
        label_seconds=np.array(cols[2], dtype=np.int64),
        slices=list(cols[5]),
        inputs=[bytes(b) for b in cols[6]],
        labels=np.array(cols[1], dtype=np.int64),
    )


@dataclass(frozen=True)
class StoredPredictions:
    """A page of a model's stored predictions in (ts, id) order, with their joined labels.

    ``labels`` holds the class index of a joined label, -1 for a prediction still unlabeled;
    ``last`` is the (ts, id) to continue after.
    """

    contract_ids: list[str]
    seconds: np.ndarray
    slices: list[str]
    inputs: list[bytes]
    labels: np.ndarray
    last: tuple[datetime, str] | None


def predictions_page(
    session: Session, model: str, after: tuple[datetime, str] | None, limit: int
) -> StoredPredictions:
    """Up to ``limit`` predictions of ``model`` after ``after`` in (ts, id) order (keyset walk)."""
    where = "p.model = :model"
    params: dict[str, Any] = {"model": model, "limit": limit}
    if after is not None:
        where += " AND (p.ts > :ts OR (p.ts = :ts AND p.id > :id))"
        params["ts"], params["id"] = after
    query = text(
        f"SELECT p.ts, p.id, p.contract_id, {_epoch(session, 'p.ts')}, p.slices, p.inputs,"
        " l.label FROM predictions p LEFT JOIN labels l ON l.model = p.model AND"
        f" l.id = p.id AND l.joined WHERE {where} ORDER BY p.ts, p.id LIMIT :limit"
    ).columns(ts=_TS)
    if after is not None:
        query = query.bindparams(bindparam("ts", type_=_TS))
    rows = session.execute(query, params).all()
    return StoredPredictions(
        contract_ids=[r[2] for r in rows],
        seconds=np.array([r[3] for r in rows], dtype=np.int64),
        slices=[r[4] for r in rows],
        inputs=[bytes(r[5]) for r in rows],
        labels=np.array([-1 if r[6] is None else r[6] for r in rows], dtype=np.int64),
        last=(rows[-1][0], rows[-1][1]) if rows else None,
    )
