"""The stream's staging tables: a batch loaded in bulk into a per-connection temporary table,
which the stream's statements then join to the stored rows.

PostgreSQL loads with binary ``COPY`` (the fast path the ingest targets rely on), SQLite with
``executemany`` (``Backend.load_staging``). Staging tables are created once per connection and
emptied before every load (SQLite) or at every commit (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from service.db.backend import backend_of

#: name -> (column, PostgreSQL type, SQLite type), in load order.
STAGING_TABLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "stage_predictions": (
        ("id", "text", "TEXT"),
        ("ts", "timestamptz", "TIMESTAMP"),
        ("cohort", "text", "TEXT"),
        ("slices", "text", "TEXT"),
        ("inputs", "bytea", "BLOB"),
    ),
    "stage_bucket_deltas": (
        ("k", "int4", "INTEGER"),
        ("slice", "text", "TEXT"),
        ("resolution", "text", "TEXT"),
        ("bucket_start", "timestamptz", "TIMESTAMP"),
        ("contract_id", "text", "TEXT"),
        ("n_predictions", "int8", "INTEGER"),
        ("n_labeled", "int8", "INTEGER"),
        ("unlabeled_expected_correct", "float8", "REAL"),
        ("unlabeled_expected_square", "float8", "REAL"),
    ),
    "stage_bucket_vectors": (
        ("k", "int4", "INTEGER"),
        ("row_id", "text", "INTEGER"),
        ("confidence_counts", "bytea", "BLOB"),
        ("stats", "bytea", "BLOB"),
    ),
    "stage_labels": (
        ("id", "text", "TEXT"),
        ("label", "int2", "INTEGER"),
        ("label_name", "text", "TEXT"),
        ("ts", "timestamptz", "TIMESTAMP"),
    ),
}


#: name -> the columns its statements join or filter on: the only ones the planner gets
#: statistics of (the others are payload, and sampling them costs as much as the join keys).
STAGING_KEYS: dict[str, tuple[str, ...]] = {
    "stage_predictions": ("id",),
    "stage_bucket_deltas": ("k", "slice", "resolution", "bucket_start", "contract_id"),
    "stage_bucket_vectors": ("k", "row_id"),
    "stage_labels": ("id",),
}


def load(session: Session, table: str, rows: Iterable[Sequence[Any]]) -> None:
    """Fill the staging ``table`` with ``rows`` (tuples in the table's column order)."""
    backend_of(session).load_staging(
        session, table, STAGING_TABLES[table], rows, STAGING_KEYS[table]
    )
