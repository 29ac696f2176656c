"""What makes ingest idempotent, without touching the database: each prediction's stored bytes,
the batch's distinct cohorts, and its repeated ids (the same content twice is one prediction,
different content under one id a conflict). Against stored rows the same comparison runs in SQL
(``service.stream.prediction_store``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from service.common.errors import Conflict, ErrorDetail
from service.stream.batch_columns import PredictionBatch


def canonical_cohort(cohort: Mapping[str, str]) -> str:
    """A cohort's canonical JSON: sorted keys, no whitespace."""
    return json.dumps(cohort, sort_keys=True, separators=(",", ":"))


def distinct_cohorts(
    cohorts: Sequence[Mapping[str, str]],
) -> tuple[list[int], list[dict[str, str]]]:
    """Index every row's cohort into the batch's distinct cohorts (first-seen order)."""
    by_items: dict[tuple[tuple[str, str], ...], int] = {}
    by_canonical: dict[tuple[tuple[str, str], ...], int] = {}
    distinct: list[dict[str, str]] = []
    cohort_of = []
    for cohort in cohorts:
        items = tuple(cohort.items())
        k = by_items.get(items)
        if k is None:
            canonical = tuple(sorted(items))
            k = by_canonical.get(canonical)
            if k is None:
                k = by_canonical[canonical] = len(distinct)
                distinct.append(dict(canonical))
            by_items[items] = k
        cohort_of.append(k)
    return cohort_of, distinct


def row_bytes(inputs: np.ndarray) -> list[bytes]:
    """Each row's logits (or score) as little-endian float64 bytes: what is stored and compared."""
    flat = np.ascontiguousarray(inputs, dtype="<f8")
    width = flat.itemsize * (flat.shape[1] if flat.ndim == 2 else 1)
    buffer = flat.tobytes()
    return [buffer[i : i + width] for i in range(0, len(buffer), width)]


#: What a prediction's id must come with to be the same prediction: its event time, the index of
#: its canonical cohort among the batch's distinct cohorts, and its stored bytes.
Content = tuple[datetime, int, bytes]


def dedupe_batch(batch: PredictionBatch, contents: Sequence[Content]) -> tuple[list[int], int]:
    """Indices of each id's first occurrence and the number of exact repeats; 409 otherwise."""
    first: dict[str, int] = {}
    keep: list[int] = []
    repeats = 0
    for i, ident in enumerate(batch.ids):
        j = first.get(ident)
        if j is None:
            first[ident] = i
            keep.append(i)
        elif contents[j] == contents[i]:
            repeats += 1
        else:
            raise Conflict(
                f"prediction id {ident!r} appears twice in the batch with different content",
                [ErrorDetail(f"predictions[{i}].id", f"conflicts with predictions[{j}]", i)],
            )
    return keep, repeats
