"""The SQLite side of ``service.stream.sql``: the embedded default.

SQLite serialises writers (``BEGIN IMMEDIATE``, ``service.db.database``), so nothing is locked;
its planner always probes a primary key, so no statement needs fencing. ``INSERT ... SELECT ...
ON CONFLICT`` needs a ``WHERE`` before ``ON CONFLICT`` (a parser ambiguity), hence the
``WHERE true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from service.db.types import UTCDateTime
from service.stream.sql.columns import LabeledRows, PredictionColumns

_NOW = bindparam("now", type_=UTCDateTime())


def _epoch(column: str) -> str:
    """Whole seconds since the epoch of a stored time, rounded down as on PostgreSQL: the
    fraction is cut off first, since SQLite's date functions keep milliseconds and would
    round a time of .9995 s or more up to the next second (and bucket)."""
    return f"CAST(strftime('%s', substr({column}, 1, 19)) AS INTEGER)"


class SQLiteStream:
    """The stream's statements on the embedded backend."""

    probe_fence = ""
    row_id_match = "b.rowid = v.row_id"

    def row_ids(self, ids: Sequence[int]) -> None:
        """``row_id_match`` takes no list: SQLite joins on the ``rowid`` alone."""
        return None

    epoch_seconds = staticmethod(_epoch)

    def locked_bucket_rows(
        self, session: Session, params: Mapping[str, Any], vectors: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Writers are serialised, so nothing is locked; ``:only`` filters the rows here (a
        statement parameter per key could exceed SQLite's limit on parameters)."""
        columns = ", ".join(["s.k", "b.rowid", *(f"b.{v}" for v in vectors)])
        rows = session.execute(
            text(
                f"SELECT {columns} FROM stage_bucket_deltas s"
                " JOIN calibration_buckets b ON b.model = :model AND b.slice = s.slice"
                " AND b.resolution = s.resolution AND b.bucket_start = s.bucket_start"
                " AND b.contract_id = s.contract_id"
            ),
            {"model": params["model"]},
        )
        wanted = set(params["only"]) if "only" in params else None
        return [tuple(row) for row in rows if wanted is None or row[0] in wanted]

    def insert_new_predictions(
        self, session: Session, params: Mapping[str, Any], columns: PredictionColumns
    ) -> bool:
        """Never taken: SQLite's staging costs an ``executemany`` into a temporary table, about
        what a plain insert would, so every batch takes the staged path."""
        return False

    def claim_waiting_labels(
        self, session: Session, model: str, ids: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Every batch is staged here: the staged ids stand for ``ids``."""
        rows = session.execute(
            text(
                "UPDATE labels SET joined = true WHERE model = :model AND NOT joined"
                " AND id IN (SELECT id FROM stage_predictions) RETURNING id, label, label_name"
            ),
            {"model": model},
        )
        return [tuple(row) for row in rows]

    def insert_staged_predictions(self, session: Session, params: Mapping[str, Any]) -> set[str]:
        statement = text(
            "INSERT INTO predictions (model, id, ts, contract_id, cohort, slices, inputs,"
            " received_at) SELECT :model, id, ts, :contract_id, cohort, slices, inputs, :now"
            " FROM stage_predictions WHERE true ON CONFLICT (model, id) DO NOTHING RETURNING id"
        ).bindparams(_NOW)
        return set(session.execute(statement, params).scalars())

    def record_staged_labels(
        self, session: Session, params: Mapping[str, Any]
    ) -> tuple[LabeledRows, list[str]]:
        exists = "EXISTS (SELECT 1 FROM predictions p WHERE p.model = :model AND p.id = s.id)"
        inserted = session.execute(
            text(
                "INSERT INTO labels (model, id, label, label_name, ts, received_at, joined)"
                f" SELECT CAST(:model AS VARCHAR), s.id, s.label, s.label_name, s.ts, :now,"
                f" {exists}"
                " FROM stage_labels s WHERE true ON CONFLICT (model, id) DO NOTHING"
                " RETURNING id, joined"
            ).bindparams(_NOW),
            params,
        ).all()
        joined = {row[0] for row in inserted if row[1]}
        found = [
            tuple(row)
            for row in session.execute(
                text(
                    f"SELECT s.id, p.contract_id, {_epoch('p.ts')}, p.slices, p.inputs, s.label,"
                    f" s.label_name, {_epoch('s.ts')} FROM stage_labels s JOIN predictions p"
                    " ON p.model = :model AND p.id = s.id"
                ),
                {"model": params["model"]},
            ).all()
            if row[0] in joined
        ]
        rows = LabeledRows.of_rows([row[:7] for row in found])
        label_seconds = np.array([row[7] for row in found], dtype=np.int64)
        waiting = [row[0] for row in inserted if not row[1]]
        return replace(rows, label_seconds=label_seconds), waiting

    def waiting_labels_with_predictions(self, session: Session, model: str) -> LabeledRows:
        statement = text(
            f"SELECT l.id, p.contract_id, {_epoch('p.ts')}, p.slices, p.inputs, l.label,"
            " l.label_name FROM labels l JOIN predictions p ON p.model = l.model"
            " AND p.id = l.id WHERE l.model = :model AND NOT l.joined"
        )
        return LabeledRows.of_rows(session.execute(statement, {"model": model}).all())

    def after_prune(self, session: Session, cutoff: datetime) -> None:
        return None


SQLITE = SQLiteStream()
