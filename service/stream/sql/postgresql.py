"""The PostgreSQL side of ``service.stream.sql``: the stream's inserts by binary ``COPY``, CTEs
that insert and return in one round trip fetched in binary, and per-row primary-key probes fenced
from the planner (``OFFSET 0``).

A label finds its prediction with one probe of the primary key ``(model, id)`` of
``predictions``. The ``COPY`` and the binary fetches run on the psycopg connection under the
session (``service.db.postgresql``), which raises SQLAlchemy's errors for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db import binary_copy
from service.db.driver import UniqueViolation
from service.db.postgresql import POSTGRESQL as BACKEND
from service.db.postgresql import binary_rows, copy_binary
from service.stream.sql.columns import LabeledRows, PredictionColumns


def _epoch(column: str) -> str:
    return f"floor(extract(epoch from {column}))::bigint"


def prediction_by_id(id_sql: str, columns: str, model: str = ":model") -> str:
    """A subquery for the prediction of ``:model`` whose id is ``id_sql``: one probe of the
    primary key, fenced (``OFFSET 0``) so that a planner with stale statistics cannot turn the
    lateral join into a scan of the whole table."""
    return f"SELECT {columns} FROM predictions WHERE model = {model} AND id = {id_sql} OFFSET 0"


#: The prediction's columns the label join reads to count a label in its buckets.
FOUND_COLUMNS = "contract_id, ts, slices, inputs"

_PREDICTION_COLUMNS = "model, id, ts, contract_id, cohort, slices, inputs, received_at"
#: ``claim_waiting_labels``'s statement: the ids as one binary ``text[]`` parameter.
CLAIM_WAITING = (
    "UPDATE labels l SET joined = true FROM unnest(%(ids)b::text[]) AS u(id)"
    ' WHERE l.model = %(model)s AND NOT l.joined AND l.id = u.id COLLATE "C"'
    " RETURNING l.id, l.label, l.label_name"
)


class PostgreSQLStream:
    """The stream's statements on the production backend (psycopg 3)."""

    probe_fence = " OFFSET 0"
    row_id_match = "b.ctid = CAST(v.row_id AS tid) AND b.ctid = ANY(CAST(:row_ids AS tid[]))"

    def row_ids(self, ids: Sequence[str]) -> str:
        """The text form of the ``tid[]`` (``{"(0,1)","(0,2)"}``), built in one join: a list
        parameter would have psycopg escape every element on its own (a regular expression
        each, 6.5 ms for a label batch's 1,300 ids)."""
        return "{" + ",".join(f'"{row_id}"' for row_id in ids) + "}"

    epoch_seconds = staticmethod(_epoch)

    def locked_bucket_rows(
        self, session: Session, params: Mapping[str, Any], vectors: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Fetched in binary: the statistics blobs arrive as bytes, not as hex text."""
        where = " WHERE k = ANY(%(only)s)" if "only" in params else ""
        statement = (
            f"SELECT {', '.join(['s.k', 'CAST(b.ctid AS text)', *(f'b.{v}' for v in vectors)])}"
            f" FROM (SELECT * FROM stage_bucket_deltas{where}"
            "  ORDER BY slice, resolution, bucket_start, contract_id) s"
            f" CROSS JOIN LATERAL (SELECT {', '.join(['ctid', *vectors])}"
            "  FROM calibration_buckets WHERE model = %(model)s AND slice = s.slice"
            "  AND resolution = s.resolution AND bucket_start = s.bucket_start"
            "  AND contract_id = s.contract_id FOR UPDATE) b"
        )
        return binary_rows(session, statement, params)

    def insert_new_predictions(
        self, session: Session, params: Mapping[str, Any], columns: PredictionColumns
    ) -> bool:
        """One binary ``COPY`` straight into ``predictions`` under a savepoint, its input built
        column by column (``binary_copy``). A batch whose ids are all new (the usual case: a
        retry is the exception) is then written once, without a staging table, its ``ANALYZE``
        and the speculative ``INSERT ... ON CONFLICT``, which together cost PostgreSQL about
        three times the ``COPY``. A stored id (a resent batch, or one committed meanwhile by a
        concurrent transaction) breaks the primary key and undoes the ``COPY``."""
        n = len(columns.ids)
        if not n:
            return True
        data = binary_copy.payload(
            [
                binary_copy.constant(params["model"].encode(), n),
                binary_copy.texts(pa.array(columns.ids, pa.string())),
                binary_copy.timestamps(pa.array(columns.ts, pa.timestamp("us", "UTC"))),
                binary_copy.constant(params["contract_id"].encode(), n),
                binary_copy.texts(pa.array(columns.cohorts, pa.string())),
                binary_copy.texts(pa.array(columns.slices, pa.string())),
                binary_copy.fixed(columns.inputs),
                binary_copy.timestamp(params["now"], n),
            ]
        )
        copy_sql = f"COPY predictions ({_PREDICTION_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        try:
            with session.begin_nested():
                copy_binary(session, copy_sql, data)
        except IntegrityError as exc:
            if not isinstance(exc.orig, UniqueViolation):
                raise
            return False
        return True

    def claim_waiting_labels(
        self, session: Session, model: str, ids: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """The ids go as one binary ``text[]`` (the batch is staged only after a failed
        ``COPY``), hashed against the waiting labels found through their partial index."""
        with BACKEND.linear_joins(session):
            return binary_rows(session, CLAIM_WAITING, {"model": model, "ids": list(ids)})

    def insert_staged_predictions(self, session: Session, params: Mapping[str, Any]) -> set[str]:
        """The inserted ids come back as one array, fetched in binary (a row per id would cost
        the service more to fetch than the database to return)."""
        statement = (
            "WITH inserted AS (INSERT INTO predictions (model, id, ts, contract_id, cohort, slices,"
            " inputs, received_at) SELECT %(model)s, id, ts, %(contract_id)s, cohort::json, slices,"
            " inputs, %(now)s FROM stage_predictions ON CONFLICT (model, id) DO NOTHING"
            " RETURNING id) SELECT array_agg(id) FROM inserted"
        )
        ((ids,),) = binary_rows(session, statement, params)
        return set() if ids is None else set(ids)

    def record_staged_labels(
        self, session: Session, params: Mapping[str, Any]
    ) -> tuple[LabeledRows, list[str]]:
        """One statement probes each staged label's prediction, inserts the new labels and
        aggregates what it inserted into one row of arrays, fetched in binary (a row per label
        would cost the service more to decode than the statement costs the database).

        The labels are first inserted plainly, under a savepoint, on the bet that none is
        stored yet: the insert's own check of the primary key is then the only probe of
        ``labels``. A label stored before (a resent batch) or committed meanwhile by a
        concurrent transaction breaks the unique key; the batch is then recorded by the same
        statement with ``ON CONFLICT DO NOTHING``, which skips the stored ones. The plain
        insert is the usual path because a speculative insert (``ON CONFLICT``) costs
        PostgreSQL about twice as much per row: it checks the key, inserts with a token and
        confirms each row in the WAL.
        """
        try:
            with session.begin_nested():
                row = self._record_labels(session, params, speculative=False)
        except IntegrityError as exc:
            if not isinstance(exc.orig, UniqueViolation):
                raise
            row = self._record_labels(session, params, speculative=True)
        ids, contract_ids, seconds, slices, inputs, labels, names, label_seconds, waiting = (
            [] if value is None else value for value in row
        )
        joined = LabeledRows(
            ids=ids,
            contract_ids=contract_ids,
            seconds=np.array(seconds, dtype=np.int64),
            slices=slices,
            inputs=inputs,
            labels=np.array(labels, dtype=np.int64),
            names=names,
            label_seconds=np.array(label_seconds, dtype=np.int64),
        )
        return joined, waiting

    @staticmethod
    def _record_labels(
        session: Session, params: Mapping[str, Any], *, speculative: bool
    ) -> tuple[Any, ...]:
        """The label statement, with an ``ON CONFLICT`` insert (``speculative``) or with a
        plain insert of every staged label."""
        probe = prediction_by_id("s.id", FOUND_COLUMNS, "%(model)s")
        insert = (
            "INSERT INTO labels (model, id, label, label_name, ts, received_at, joined)"
            " SELECT %(model)s, id, label, label_name, ts, %(now)s, contract_id IS NOT NULL"
            " FROM found"
        )
        inserted = "found f"
        if speculative:
            insert = f"{insert} ON CONFLICT (model, id) DO NOTHING RETURNING id"
            inserted = "found f JOIN ins ON ins.id = f.id"
        joined = "FILTER (WHERE contract_id IS NOT NULL)"
        statement = (
            "WITH found AS (SELECT s.id, s.label, s.label_name, s.ts, p.contract_id, p.ts AS pts,"
            " p.slices,"
            f" p.inputs FROM stage_labels s LEFT JOIN LATERAL ({probe}) p ON true),"
            f" ins AS ({insert})"
            f" SELECT array_agg(f.id) {joined}, array_agg(f.contract_id) {joined},"
            f" array_agg({_epoch('f.pts')}) {joined}, array_agg(f.slices) {joined},"
            f" array_agg(f.inputs) {joined}, array_agg(f.label) {joined},"
            f" array_agg(f.label_name) {joined}, array_agg({_epoch('f.ts')}) {joined},"
            f" array_agg(f.id) FILTER (WHERE f.contract_id IS NULL) FROM {inserted}"
        )
        (row,) = binary_rows(session, statement, params)
        return row

    def waiting_labels_with_predictions(self, session: Session, model: str) -> LabeledRows:
        statement = text(
            f"SELECT l.id, p.contract_id, {_epoch('p.ts')}, p.slices, p.inputs, l.label,"
            f" l.label_name FROM labels l CROSS JOIN LATERAL"
            f" ({prediction_by_id('l.id', FOUND_COLUMNS)}) p"
            " WHERE l.model = :model AND NOT l.joined FOR UPDATE OF l"
        )
        return LabeledRows.of_rows(session.execute(statement, {"model": model}).all())

    def after_prune(self, session: Session, cutoff: datetime) -> None:
        """Summarise the block ranges of the BRIN indexes on ``ts`` not yet summarised."""
        for index in ("ix_predictions_ts", "ix_labels_ts"):
            session.execute(
                text("SELECT brin_summarize_new_values(CAST(:index AS regclass))"), {"index": index}
            )


POSTGRESQL = PostgreSQLStream()
