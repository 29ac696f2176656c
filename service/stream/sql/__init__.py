"""The stream's SQL that differs between PostgreSQL and SQLite: ``StreamSQL``, implemented by
``service.stream.sql.postgresql`` and ``service.stream.sql.sqlite``; ``for_session`` picks one.

The stream's stores call it for the statements a portable form would make slow on one backend
(binary ``COPY``, CTEs that insert and return in one round trip, primary-key probes fenced from
the planner) and write every other statement in portable SQL. The shapes these statements take
and return are in ``service.stream.sql.columns``; the staging tables they join are in
``service.stream.sql.staging``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session

from service.stream.sql.columns import LabeledRows, PredictionColumns
from service.stream.sql.postgresql import POSTGRESQL
from service.stream.sql.sqlite import SQLITE


class StreamSQL(Protocol):
    """What the stream asks of a database beyond portable SQL."""

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

    def epoch_seconds(self, column: str) -> str:
        """SQL for a timestamp column as whole seconds since the epoch (floor)."""

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

    def locked_bucket_rows(
        self, session: Session, params: Mapping[str, Any], vectors: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """The stored ``:model`` buckets of the staged bucket deltas (of those whose ``k`` is in
        ``:only``, where ``params`` holds it), locked until commit in key order:
        ``(k, row id, *vectors)`` with the named blob columns, one primary-key probe per staged
        key; a key without a stored bucket yields no row."""

    def record_staged_labels(
        self, session: Session, params: Mapping[str, Any]
    ) -> tuple[LabeledRows, list[str]]:
        """Insert the staged labels new for ``:model`` received ``:now`` (joined when their
        prediction is stored); return ``(the labels joined, with their own event times; the
        ids of the labels inserted without their prediction)``."""

    def waiting_labels_with_predictions(self, session: Session, model: str) -> LabeledRows:
        """Labels of ``model`` still waiting though their prediction is stored, locked."""

    def after_prune(self, session: Session, cutoff: datetime) -> None:
        """Whatever the indexes of ``predictions`` and ``labels`` need after their rows before
        ``cutoff`` were deleted."""


def for_session(session: Session) -> StreamSQL:
    """The ``StreamSQL`` of the session's database."""
    return POSTGRESQL if session.get_bind().dialect.name == "postgresql" else SQLITE
