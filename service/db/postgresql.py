"""The PostgreSQL side of ``service.db.backend``: binary COPY staging, CTEs that insert and
return in one round trip, advisory locks, planner statistics, and per-row primary-key probes
fenced from the planner (``OFFSET 0``).

A label finds its prediction with one probe of the primary key ``(model, id)`` of
``predictions``. What psycopg raises on the statements it runs directly (the ``COPY`` and the
binary fetches) leaves this module as SQLAlchemy's error for it, the connection invalidated when
it was lost (``_driver_errors``), like every other statement's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast

import psycopg
import pyarrow as pa
from sqlalchemy import Connection, Select, Table, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from service.db import binary_copy
from service.db.dialect import AnySelect, Columns, PredictionColumns, RecordedLabels, Rows


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


#: What a staging table's column of each type is declared with beyond its type.
_STAGED_STORAGE = {"text": ' COLLATE "C"', "bytea": " COMPRESSION lz4"}


def _psycopg(session: Session) -> psycopg.Connection[Any]:
    """The psycopg connection under ``session``, in the session's transaction."""
    return cast("psycopg.Connection[Any]", session.connection().connection.dbapi_connection)


@contextmanager
def _driver_errors(session: Session, statement: str) -> Iterator[None]:
    """Raise what psycopg raises within the block as SQLAlchemy would have: its ``DBAPIError``
    subclass (``OperationalError`` for a lost connection, ``IntegrityError`` for a broken key),
    the session's connection invalidated first when psycopg lost it, so that nothing tries to
    roll it back and the pool opens a new one."""
    try:
        yield
    except psycopg.Error as exc:
        connection = session.connection()
        driver = _psycopg(session)
        lost = driver.closed or driver.broken
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement,
            None,
            exc,
            psycopg.Error,
            connection_invalidated=lost,
            dialect=connection.dialect,
        ) from exc


def _binary_rows(session: Session, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (``%(name)s`` parameters) fetched in binary, in the session's
    transaction: a ``bytea`` arrives as bytes rather than hex text, an array as a list."""
    with _driver_errors(session, sql), _psycopg(session).cursor(binary=True) as cursor:
        cursor.execute(sql, dict(params))
        return cursor.fetchall()


class PostgreSQL:
    """The production backend (psycopg 3)."""

    name = "postgresql"
    probe_fence = " OFFSET 0"
    row_id_match = "b.ctid = CAST(v.row_id AS tid) AND b.ctid = ANY(CAST(:row_ids AS tid[]))"

    def row_ids(self, ids: Sequence[str]) -> str:
        """The text form of the ``tid[]`` (``{"(0,1)","(0,2)"}``), built in one join: a list
        parameter would have psycopg escape every element on its own (a regular expression
        each, 6.5 ms for a label batch's 1,300 ids)."""
        return "{" + ",".join(f'"{row_id}"' for row_id in ids) + "}"

    def insert(self, table: Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def for_update(self, statement: Select[Any]) -> Select[Any]:
        return statement.with_for_update()

    def advisory_lock(self, session: Session, key: int) -> None:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def analyze(self, session: Session, tables: Sequence[str]) -> None:
        for table in tables:
            session.execute(text(f"ANALYZE {table}"))

    @contextmanager
    def linear_joins(self, session: Session) -> Iterator[None]:
        """``enable_nestloop`` off for the block, then back to what it was (``SET LOCAL``: an
        error inside the block ends the transaction and the setting with it)."""
        before = session.execute(text("SHOW enable_nestloop")).scalar_one()
        session.execute(text("SET LOCAL enable_nestloop = off"))
        yield
        session.execute(
            text("SELECT set_config('enable_nestloop', :before, true)"), {"before": before}
        )

    def epoch_seconds(self, column: str) -> str:
        return _epoch(column)

    def load_staging(
        self, session: Session, table: str, columns: Columns, rows: Rows, keys: Sequence[str]
    ) -> None:
        """Binary ``COPY`` into a temporary table emptied at every commit, then ``ANALYZE`` its
        ``keys`` so the planner joins it to the big tables through their primary-key indexes.

        Text columns compare byte by byte (``COLLATE "C"``, as the hot tables' keys do): the
        sort behind ``ANALYZE`` then costs half as much as under the database's locale. Binary
        columns are compressed with ``lz4`` (bucket statistics of a few KB each would otherwise
        pass through ``pglz``, several times slower, on every load; the bucket table keeps the
        ``lz4`` datum as it is)."""
        ddl = ", ".join(f"{name} {pg}{_STAGED_STORAGE.get(pg, '')}" for name, pg, _ in columns)
        session.execute(
            text(f"CREATE TEMP TABLE IF NOT EXISTS {table} ({ddl}) ON COMMIT DELETE ROWS")
        )
        names = ", ".join(name for name, _, _ in columns)
        copy_sql = f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)"
        with (
            _driver_errors(session, copy_sql),
            _psycopg(session).cursor() as cursor,
            cursor.copy(copy_sql) as copy,
        ):
            copy.set_types([pg for _, pg, _ in columns])
            for row in rows:
                copy.write_row(row)
        session.execute(text(f"ANALYZE {table} ({', '.join(keys)})"))

    def fetch_rows(self, session: Session, statement: AnySelect) -> list[tuple[Any, ...]]:
        """Fetched in binary: a ``bytea`` arrives as bytes rather than hex text to decode, a
        number or timestamp in its wire form; timestamps in the connection's time zone."""
        compiled = statement.compile(dialect=session.get_bind().dialect)
        return _binary_rows(session, str(compiled), compiled.params)

    def locked_bucket_rows(
        self,
        session: Session,
        params: Mapping[str, Any],
        vectors: Sequence[str],
        only: Sequence[int] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Fetched in binary: the statistics blobs arrive as bytes, not as hex text."""
        where = "" if only is None else " WHERE k = ANY(%(only)s)"
        statement = (
            f"SELECT {', '.join(['s.k', 'CAST(b.ctid AS text)', *(f'b.{v}' for v in vectors)])}"
            f" FROM (SELECT * FROM stage_bucket_deltas{where}"
            "  ORDER BY slice, resolution, bucket_start, contract_id) s"
            f" CROSS JOIN LATERAL (SELECT {', '.join(['ctid', *vectors])}"
            "  FROM calibration_buckets WHERE model = %(model)s AND slice = s.slice"
            "  AND resolution = s.resolution AND bucket_start = s.bucket_start"
            "  AND contract_id = s.contract_id FOR UPDATE) b"
        )
        return _binary_rows(session, statement, {**params, "only": list(only or ())})

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
            with (
                session.begin_nested(),
                _driver_errors(session, copy_sql),
                _psycopg(session).cursor() as cursor,
                cursor.copy(copy_sql) as copy,
            ):
                copy.write(data)
        except IntegrityError as exc:
            if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                raise
            return False
        return True

    def claim_waiting_labels(
        self, session: Session, model: str, ids: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """The ids go as one binary ``text[]`` (the batch is staged only after a failed
        ``COPY``), hashed against the waiting labels found through their partial index."""
        with self.linear_joins(session):
            return _binary_rows(session, CLAIM_WAITING, {"model": model, "ids": list(ids)})

    def insert_staged_predictions(self, session: Session, params: Mapping[str, Any]) -> set[str]:
        """The inserted ids come back as one array, fetched in binary (a row per id would cost
        the service more to fetch than the database to return)."""
        statement = (
            "WITH inserted AS (INSERT INTO predictions (model, id, ts, contract_id, cohort, slices,"
            " inputs, received_at) SELECT %(model)s, id, ts, %(contract_id)s, cohort::json, slices,"
            " inputs, %(now)s FROM stage_predictions ON CONFLICT (model, id) DO NOTHING"
            " RETURNING id) SELECT array_agg(id) FROM inserted"
        )
        ((ids,),) = _binary_rows(session, statement, params)
        return set() if ids is None else set(ids)

    def record_staged_labels(self, session: Session, params: Mapping[str, Any]) -> RecordedLabels:
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
            if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                raise
            row = self._record_labels(session, params, speculative=True)
        ids, labels, label_seconds, contract_ids, seconds, slices, inputs, waiting = (
            [] if value is None else value for value in row
        )
        return RecordedLabels(
            ids, labels, label_seconds, contract_ids, seconds, slices, inputs, waiting
        )

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
            f" SELECT array_agg(f.id) {joined}, array_agg(f.label) {joined},"
            f" array_agg({_epoch('f.ts')}) {joined}, array_agg(f.contract_id) {joined},"
            f" array_agg({_epoch('f.pts')}) {joined}, array_agg(f.slices) {joined},"
            f" array_agg(f.inputs) {joined},"
            f" array_agg(f.id) FILTER (WHERE f.contract_id IS NULL) FROM {inserted}"
        )
        (row,) = _binary_rows(session, statement, params)
        return row

    def waiting_labels_with_predictions(
        self, session: Session, model: str
    ) -> list[tuple[Any, ...]]:
        statement = text(
            f"SELECT l.id, l.label, {_epoch('l.ts')}, p.contract_id, {_epoch('p.ts')}, p.slices,"
            f" p.inputs, l.label_name FROM labels l CROSS JOIN LATERAL"
            f" ({prediction_by_id('l.id', FOUND_COLUMNS)}) p"
            " WHERE l.model = :model AND NOT l.joined FOR UPDATE OF l"
        )
        return [tuple(r) for r in session.execute(statement, {"model": model})]

    def writes_refused(self, connection: Connection) -> str | None:
        """A standby in recovery, or sessions read-only by default (``ALTER DATABASE ... SET
        default_transaction_read_only``, or the server's setting)."""
        in_recovery, read_only = connection.execute(
            text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        ).one()
        if in_recovery:
            return "the database is a standby in recovery: it takes no writes"
        if read_only == "on":
            return "the database's transactions are read-only (default_transaction_read_only)"
        return None

    def after_prune(self, connection: Connection, cutoff: datetime) -> None:
        """Summarise the block ranges of the BRIN indexes on ``ts`` not yet summarised."""
        for index in ("ix_predictions_ts", "ix_labels_ts"):
            connection.execute(
                text("SELECT brin_summarize_new_values(CAST(:index AS regclass))"), {"index": index}
            )


POSTGRESQL = PostgreSQL()
