"""The interface of the SQL that differs between PostgreSQL and SQLite: ``Backend`` and the
shapes its methods take and return. ``service.db.postgresql`` and ``service.db.sqlite`` implement
it; ``service.db.backend.backend_of`` picks one for a connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from sqlalchemy import Connection, Select, Table
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from collections.abc import Mapping

Insert = PgInsert | SqliteInsert
#: A staging table's columns, ``(name, PostgreSQL type, SQLite type)``, and its rows.
Columns = Sequence[tuple[str, str, str]]
Rows = Iterable[Sequence[Any]]
#: A ``SELECT`` of any columns.
AnySelect = Select[*tuple[Any, ...]]


@dataclass(frozen=True)
class RecordedLabels:
    """The labels one statement inserted, column by column.

    The first seven lists describe the J labels joined to their stored prediction, in one order:
    ``labels`` are the stored class indices, ``label_seconds`` and ``seconds`` whole seconds
    since the epoch of the label's and of the prediction's event time, ``slices`` the
    prediction's stored JSON slice list and ``inputs`` its stored bytes. ``waiting`` holds the
    ids of the labels inserted without their prediction.
    """

    ids: list[str]
    labels: list[int]
    label_seconds: list[int]
    contract_ids: list[str]
    seconds: list[int]
    slices: list[str]
    inputs: list[bytes]
    waiting: list[str]


@dataclass(frozen=True)
class PredictionColumns:
    """A validated batch of new predictions, column by column (N rows, in id order).

    ``ts`` are aware datetimes, ``cohorts`` each row's canonical cohort JSON text, ``slices``
    its JSON list of slices, ``inputs`` (N, W) little-endian float64: row ``i``'s stored bytes
    are ``inputs[i].tobytes()``.
    """

    ids: list[str]
    ts: list[datetime]
    cohorts: list[str]
    slices: list[str]
    inputs: np.ndarray

    def rows(self) -> list[tuple[str, datetime, str, str, bytes]]:
        """Row by row, in the column order of the ``stage_predictions`` staging table."""
        stored = [row.tobytes() for row in self.inputs]
        return list(zip(self.ids, self.ts, self.cohorts, self.slices, stored, strict=True))


class Backend(Protocol):
    """What calmon asks of a database beyond portable SQL."""

    name: str
    #: Appended to a correlated subquery to keep it a per-row primary-key probe (``OFFSET 0``
    #: on PostgreSQL, where a planner with stale statistics may otherwise hash a whole table).
    probe_fence: str
    #: Matches a bucket row ``b`` with the staged row ``v`` that carries its ``row_id`` (as
    #: returned by ``locked_bucket_rows``), and confines ``b`` to the rows listed in the
    #: ``:row_ids`` parameter: the rows are then fetched by their ids whatever the planner
    #: believes of the table (PostgreSQL with stale statistics may otherwise hash every bucket
    #: row of the model to join a few).
    row_id_match: str

    def row_ids(self, ids: Sequence[Any]) -> Any:
        """The ``:row_ids`` parameter of ``row_id_match`` for the row ids ``ids``."""

    def insert(self, table: Table) -> Insert:
        """An ``INSERT`` that supports ``ON CONFLICT`` (``on_conflict_do_nothing/update``)."""

    def for_update(self, statement: Select[Any]) -> Select[Any]:
        """``statement`` holding its rows until commit (a no-op where writes are serialised)."""

    def advisory_lock(self, session: Session, key: int) -> None:
        """Serialise with other transactions taking ``key`` until commit."""

    def analyze(self, session: Session, tables: Sequence[str]) -> None:
        """Refresh the planner's statistics of ``tables`` (a no-op without a planner to feed)."""

    def linear_joins(self, session: Session) -> AbstractContextManager[None]:
        """Within the block, the statements of ``session`` join by hashing or merging, whose
        cost grows with the sum of the two sides, never by a nested loop, whose cost grows
        with their product when an inner side has no index the join can probe."""

    def epoch_seconds(self, column: str) -> str:
        """SQL for a timestamp column as whole seconds since the epoch (floor)."""

    def load_staging(
        self, session: Session, table: str, columns: Columns, rows: Rows, keys: Sequence[str]
    ) -> None:
        """Fill the per-connection temporary ``table`` with ``rows``, emptied first or at every
        commit; ``keys`` name the columns the statements on it join or filter on."""

    def insert_new_predictions(
        self, session: Session, params: Mapping[str, Any], columns: PredictionColumns
    ) -> bool:
        """Insert the predictions ``columns`` of ``:model`` bound to ``:contract_id``, received
        ``:now``, on the bet that none of their ids is stored: True when all were inserted, False
        (nothing written) when some id was stored already and the batch must take the staged
        path (``insert_staged_predictions``)."""

    def insert_staged_predictions(self, session: Session, params: Mapping[str, Any]) -> set[str]:
        """Insert the staged predictions whose ids are new for ``:model``; return the ids
        inserted."""

    def claim_waiting_labels(
        self, session: Session, model: str, ids: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Mark as joined the waiting labels of ``model`` whose predictions were just inserted:
        those among ``ids``, or among the staged predictions where the backend always stages
        (a superset of ``ids``). Returns ``(id, label, label name)`` of each."""

    def fetch_rows(self, session: Session, statement: AnySelect) -> list[tuple[Any, ...]]:
        """Every row of ``statement`` as a plain tuple: binary columns as ``bytes``, timestamps
        as aware datetimes, without a per-row ORM result object (for wide reads of many rows)."""

    def locked_bucket_rows(
        self,
        session: Session,
        params: Mapping[str, Any],
        vectors: Sequence[str],
        only: Sequence[int] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The stored ``:model`` buckets of the staged bucket deltas (of those whose ``k`` is in
        ``only``, if given), locked until commit in key order: ``(k, row id, *vectors)`` with
        the named blob columns, one primary-key probe per staged key; a key without a stored
        bucket yields no row."""

    def record_staged_labels(self, session: Session, params: Mapping[str, Any]) -> RecordedLabels:
        """Insert the staged labels new for ``:model`` (joined when their prediction is stored);
        return what was inserted."""

    def waiting_labels_with_predictions(
        self, session: Session, model: str
    ) -> list[tuple[Any, ...]]:
        """Labels of ``model`` still waiting though their prediction is stored: ``(id, label,
        label seconds, contract id, prediction seconds, slices JSON, inputs, label name)``,
        locked."""

    def after_prune(self, connection: Connection, cutoff: datetime) -> None:
        """Whatever the backend's indexes need after rows before ``cutoff`` were deleted."""

    def writes_refused(self, connection: Connection) -> str | None:
        """Why the database takes no writes now (a standby, read-only sessions, a read-only
        file), or None; run on a migrated database, writes nothing."""
