"""Every problem of an Arrow batch's rows, named as the item-by-item path of a JSON batch names
it (``predictions[3].ts``), in column passes.

When the fast checks of a batch given as columns (``batch_columns.prediction_columns``,
``batch_columns.label_columns``) doubt it, the rows are checked here by the rules a JSON item is
held to, value by value (``batch_bodies.id_problem``, ``check_cohort``, ``sent_label``, the
timestamp's rules) or with array operations (the logits and scores, whose messages are those of
``batch_bodies.row_numbers_problem``): a few microseconds per row whatever its width, where
validating an item costs about 100 microseconds for K = 16 and milliseconds for K = 1,000. A null
is the field missing from that row. Each row's problems come in the item path's order: its
missing fields, then the problems of its fields in the order the item declares them
(``batch_bodies.MulticlassPrediction``, ``BinaryPrediction``, ``LabelItem``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from service.calibration._checks import MAX_ABS_LOGIT
from service.calibration.vocabulary import Task
from service.common.declared import message_of
from service.common.errors import ErrorCollector
from service.common.values import (
    TIMESTAMP_HINT,
    format_timestamp,
    parse_timestamp,
    timestamp_problem,
)
from service.contracts.labeled_sets import inputs_problem, number_problem
from service.stream.batch_bodies import check_cohort, id_problem, row_numbers_problem, sent_label

MISSING = message_of("missing", {}, "")
#: A row's missing fields come before the problems of its fields.
_PROBLEM_RANK = 100


class RowProblems:
    """The problems found, as ``(row, rank, path below the row's item, message)``, reported in
    row order."""

    def __init__(self, items: str) -> None:
        self.items = items
        self.found: list[tuple[int, int, str, str]] = []

    def missing(self, row: int, position: int, name: str) -> None:
        """Field ``name``, the ``position``-th the item declares, is null in ``row``."""
        self.found.append((row, position, name, MISSING))

    def problem(self, row: int, position: int, path: str, message: str) -> None:
        """The field at ``position`` has a problem at ``path`` (below ``items[row]``)."""
        self.found.append((row, _PROBLEM_RANK + position, path, message))

    def ids(self, ids: Sequence[Any], position: int) -> None:
        """``ids``: per row None (null) or the text sent."""
        for row, ident in enumerate(ids):
            if ident is None:
                self.missing(row, position, "id")
            elif (message := id_problem(ident)) is not None:
                self.problem(row, position, "id", message)

    def stamps(self, raw: Sequence[Any], now: datetime, position: int) -> None:
        """``raw``: per row None (null), an aware datetime, or text (RFC 3339, or not)."""
        for row, value in enumerate(raw):
            if value is None:
                self.missing(row, position, "ts")
            elif (message := _timestamp_problem(value, now)) is not None:
                self.problem(row, position, "ts", message)

    def cohorts(self, cohorts: Sequence[dict[str, str]], position: int) -> None:
        """Each distinct cohort is checked once (an empty one is the field absent)."""
        found: dict[tuple[tuple[str, str], ...], list[tuple[str, str]]] = {}
        for row, cohort in enumerate(cohorts):
            if not cohort:
                continue
            key = tuple(cohort.items())
            if key not in found:
                errors = ErrorCollector()
                check_cohort(cohort, "cohort", errors, None)
                found[key] = [(d.field, d.message) for d in errors.details]
            for path, message in found[key]:
                self.problem(row, position, path, message)

    def values(self, name: str, messages: Mapping[int, str | None], position: int) -> None:
        """``messages``: per row with a problem, its message, or None for a null."""
        for row, message in messages.items():
            if message is None:
                self.missing(row, position, name)
            else:
                self.problem(row, position, name, message)

    def raise_if_any(self, message: str) -> None:
        """``ValidationFailed`` (``message``) listing every problem, rows in order."""
        errors = ErrorCollector()
        for row, _, path, text in sorted(self.found, key=lambda found: found[:2]):
            errors.add(f"{self.items}[{row}].{path}", text, row)
        errors.raise_if_any(message)


def _timestamp_problem(value: Any, now: datetime) -> str | None:
    """Why a row's time is refused: a datetime as its RFC 3339 text would be."""
    if isinstance(value, datetime):
        if timestamp_problem(value, now) is None:
            return None
        value = format_timestamp(value)
    parsed = parse_timestamp(value)
    return TIMESTAMP_HINT if parsed is None else timestamp_problem(parsed, now)


def logit_problems(column: pa.ChunkedArray, n_classes: int) -> dict[int, str | None]:
    """Per row of a list column of logits with a problem: its message (a list not of K
    values, then its first value that is null or not finite, then a value beyond
    +-``MAX_ABS_LOGIT``), or None for a null row."""
    combined = column.combine_chunks()
    nulls = combined.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(combined.type):
        lengths = np.full(len(combined), combined.type.list_size)
    else:
        lengths = combined.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    full = ~nulls & (lengths == n_classes)
    found: dict[int, str | None] = {int(r): None for r in np.flatnonzero(nulls)}
    wrong_length = row_numbers_problem(None, Task.MULTICLASS, n_classes)
    found.update({int(r): wrong_length for r in np.flatnonzero(~nulls & ~full)})
    values = combined.filter(pa.array(full)).flatten()
    absent = values.is_null().to_numpy(zero_copy_only=False).reshape(-1, n_classes)
    logits = values.to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, n_classes)
    infinite = ~absent & ~np.isfinite(logits)
    first_absent = np.where(absent.any(axis=1), absent.argmax(axis=1), n_classes)
    first_infinite = np.where(infinite.any(axis=1), infinite.argmax(axis=1), n_classes)
    outside = (np.abs(np.where(absent | infinite, 0.0, logits)) > MAX_ABS_LOGIT).any(axis=1)
    messages = {
        "absent": number_problem(None),
        "infinite": number_problem(math.inf),
        "outside": _range_message(Task.MULTICLASS),
    }
    rows = np.flatnonzero(full)
    for kind, bad in (
        ("absent", first_absent < first_infinite),
        ("infinite", first_infinite < first_absent),
        ("outside", (first_absent == first_infinite) & outside),
    ):
        found.update({int(r): messages[kind] for r in rows[bad]})
    return found


def score_problems(column: pa.ChunkedArray) -> dict[int, str | None]:
    """Per row of a numeric column of scores with a problem: its message (not finite, or
    outside [0, 1]), or None for a null."""
    combined = column.combine_chunks()
    nulls = combined.is_null().to_numpy(zero_copy_only=False)
    scores = combined.to_numpy(zero_copy_only=False).astype(np.float64)
    finite = np.isfinite(scores)
    found: dict[int, str | None] = {int(r): None for r in np.flatnonzero(nulls)}
    infinite = number_problem(math.inf)
    found.update({int(r): infinite for r in np.flatnonzero(~nulls & ~finite)})
    outside = _range_message(Task.BINARY)
    inside = (scores >= 0) & (scores <= 1)
    found.update({int(r): outside for r in np.flatnonzero(finite & ~inside)})
    return found


def _range_message(task: str) -> str:
    """``inputs_problem``'s message for inputs of ``task`` beyond their range."""
    beyond = np.array([[2.0 * MAX_ABS_LOGIT]]) if task == Task.MULTICLASS else np.array([2.0])
    found = inputs_problem(beyond, task)
    assert found is not None
    return found[1]


def label_problems(
    raw: Sequence[Any], index_of: Mapping[str, int], n_classes: int
) -> dict[int, str | None]:
    """Per row with a problem: why its label is refused (``sent_label``), or None for a null."""
    found: dict[int, str | None] = {}
    for row, value in enumerate(raw):
        label = None if value is None else sent_label(value, index_of, n_classes)
        if label is None or isinstance(label, str):
            found[row] = label
    return found
