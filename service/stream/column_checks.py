"""The checks of a batch as columns, whichever body it came in: JSON items (``batch_columns``)
or Arrow columns (``arrow_batches``) are read once into ``SentPredictions`` or ``SentLabels``,
and both go through the checks here against the rules of ``batch_bodies`` (its module docstring
states them).

A clean batch is accepted with set and array operations over whole columns (``accept_*``). A
batch those doubt is checked field by field as masks of the same rules (``*_problems``: per row,
how many of its fields are absent or refused, plus its unknown keys), which count its problems.
The rows they flag are then validated through the declaration (``batch_bodies``:
``PREDICTION_ITEM``, ``LabelItem``), the one statement of the rules, which names their problems
as the reply lists them, until a reply's ``MAX_DETAILS`` details are found; the problems of the
rows beyond are counted from the masks. Should the declaration find nothing wrong with the rows
flagged, it validates the whole batch and decides (``parse_*_declared``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from service.calibration.vocabulary import Task
from service.common.declared import collect
from service.common.errors import MAX_DETAILS, ErrorCollector, ValidationFailed
from service.common.values import text_problem, timestamp_problem
from service.contracts.labeled_sets import inputs_problem, outside_range
from service.stream.batch_bodies import (
    MAX_ID_LENGTH,
    PREDICTION_ITEM,
    LabelItem,
    id_problem,
    sent_label,
)
from service.stream.cohorts import parse_cohort
from service.stream.label_classes import SentLabel


@dataclass(frozen=True)
class PredictionBatch:
    """Validated predictions; ``inputs`` is (N, K) float64 logits or (N,) scores in [0, 1]."""

    ids: list[str]
    ts: list[datetime]
    cohorts: list[dict[str, str]]
    inputs: np.ndarray


@dataclass(frozen=True)
class LabelBatch:
    """Validated labels as sent, first occurrence of each id only, with the position of that
    occurrence in the batch (``items``).

    ``repeats`` are later occurrences of an id in the same batch: ``(id, label)``.
    """

    ids: list[str]
    labels: list[SentLabel]
    ts: list[datetime]
    items: list[int]
    repeats: list[tuple[str, SentLabel]]


@dataclass(frozen=True)
class SentShape:
    """What is wrong with the items of a batch apart from their fields, per row: whether it is
    an object at all (one problem, its fields unread) and how many keys it has that its item
    does not declare. An Arrow batch's rows are all objects of the declared fields."""

    objects: np.ndarray
    unknown_keys: np.ndarray

    def problems(self, fields: np.ndarray) -> np.ndarray:
        """Per row, its problems: ``fields`` (per row, how many fields are absent or refused)
        plus its unknown keys, or one for an item that is not an object."""
        return np.where(self.objects, fields + self.unknown_keys, 1)


@dataclass(frozen=True)
class SentPredictions:
    """A prediction batch as columns, one entry per item sent.

    ``ids`` and ``cohorts`` as sent (an absent id is None, an absent or null cohort ``{}``);
    ``stamps`` the times parsed (None when absent or not an RFC 3339 time with a zone);
    ``inputs`` float64, (N, K) logits or (N,) scores, NaN in the rows ``readable`` marks False
    (a value absent, not K numbers, or a number no float64 holds; None: every row is
    readable); ``shape`` None for a batch of objects with the declared keys only."""

    ids: list[Any]
    stamps: list[datetime | None]
    cohorts: list[Any]
    inputs: np.ndarray
    readable: np.ndarray | None = None
    shape: SentShape | None = None


@dataclass(frozen=True)
class SentLabels:
    """A label batch as columns, one entry per item sent: ``ids`` and ``labels`` as sent (None
    when absent), ``stamps`` as in ``SentPredictions``, ``shape`` likewise."""

    ids: list[Any]
    labels: list[Any]
    stamps: list[datetime | None]
    shape: SentShape | None = None


#: Names the problems of one row through the declaration: ``(row, errors)``.
NameRow = Callable[[int, ErrorCollector], None]


def _valid_texts(texts: list[str]) -> bool:
    """True when every string is valid text (one pass over their concatenation)."""
    return text_problem("".join(texts)) is None


def _clean_ids(ids: list[Any]) -> bool:
    """Whether every id is a string of 1-``MAX_ID_LENGTH`` characters of valid text."""
    return (
        set(map(type, ids)) == {str}
        and min(map(len, ids)) >= 1
        and max(map(len, ids)) <= MAX_ID_LENGTH
        and not any(map(str.isspace, ids))
        and _valid_texts(ids)
    )


def _in_range(stamps: list[datetime | None], now: datetime) -> list[datetime] | None:
    """``stamps`` (at least one) if every one parsed and all lie in the accepted range, else
    None."""
    parsed: list[datetime] = stamps  # type: ignore[assignment]
    try:
        if timestamp_problem(min(parsed), now) or timestamp_problem(max(parsed), now):
            return None
    except TypeError:  # None does not compare with a time: one did not parse
        return None
    return parsed


def accept_predictions(
    sent: SentPredictions, task: str, now: datetime, *, cohorts_checked: bool = False
) -> PredictionBatch | None:
    """The batch if every id, time, cohort and input passes, judged whole columns at a time,
    else None (a batch with a ``shape`` or unreadable rows is refused, and without, its cohorts
    are objects); ``cohorts_checked``: the caller holds every cohort to ``parse_cohort`` already
    (Arrow checks the cohort key columns whole)."""
    ids, cohorts, inputs = sent.ids, sent.cohorts, sent.inputs
    if sent.shape is not None or sent.readable is not None or not ids or not _clean_ids(ids):
        return None
    if len(sent.stamps) != len(ids) or len(cohorts) != len(ids) or len(inputs) != len(ids):
        return None
    stamps = _in_range(sent.stamps, now)
    if stamps is None:
        return None
    if not set(map(type, itertools.chain.from_iterable(c.values() for c in cohorts))) <= {str}:
        return None
    checked: dict[tuple[tuple[str, str], ...], bool] = {}
    for cohort in () if cohorts_checked else cohorts:
        key = tuple(cohort.items())
        if key not in checked:
            checked[key] = parse_cohort(cohort, "cohort", ErrorCollector(), 0) is not None
        if not checked[key]:
            return None
    if not np.isfinite(inputs).all() or inputs_problem(inputs, task) is not None:
        return None
    return PredictionBatch(ids=ids, ts=stamps, cohorts=cohorts, inputs=inputs)


def _refused_ids(ids: Sequence[Any]) -> np.ndarray:
    return np.fromiter((id_problem(v) is not None for v in ids), bool, len(ids))


def _refused_stamps(stamps: Sequence[datetime | None], now: datetime) -> np.ndarray:
    return np.fromiter(
        (t is None or timestamp_problem(t, now) is not None for t in stamps), bool, len(stamps)
    )


def _refused_cohorts(cohorts: Sequence[Any]) -> np.ndarray:
    """Per row, whether its cohort fails ``parse_cohort``; each distinct cohort checked once."""
    checked: dict[Any, bool] = {}

    def refused(cohort: Any) -> bool:
        try:
            key = tuple(cohort.items()) if type(cohort) is dict else None
            hash(key)
        except TypeError:
            key = None
        if key is None:
            return parse_cohort(cohort, "cohort", ErrorCollector(), None) is None
        if key not in checked:
            checked[key] = parse_cohort(cohort, "cohort", ErrorCollector(), None) is None
        return checked[key]

    return np.fromiter(map(refused, cohorts), bool, len(cohorts))


def _refused_inputs(inputs: np.ndarray, readable: np.ndarray | None, task: str) -> np.ndarray:
    """Per row, whether its logits or score is unreadable, not finite or out of range."""
    finite = np.isfinite(inputs) if task != Task.MULTICLASS else np.isfinite(inputs).all(axis=1)
    with np.errstate(invalid="ignore"):
        bad = ~finite | outside_range(inputs, task)
    return bad if readable is None else bad | ~readable


def prediction_problems(sent: SentPredictions, task: str, now: datetime) -> np.ndarray:
    """Per row, how many problems the declaration finds in it (see the module docstring)."""
    fields = (
        _refused_ids(sent.ids).astype(np.int64)
        + _refused_stamps(sent.stamps, now)
        + _refused_cohorts(sent.cohorts)
        + _refused_inputs(sent.inputs, sent.readable, task)
    )
    return fields if sent.shape is None else sent.shape.problems(fields)


def _refuse(items_key: str, problems: np.ndarray, name: NameRow) -> None:
    """Raise ``ValidationFailed`` naming, through ``name``, the problems of the rows
    ``problems`` flags, up to ``MAX_DETAILS`` details, and counting those of the rows beyond;
    return if ``name`` finds none."""
    errors = ErrorCollector()
    flagged = np.flatnonzero(problems).tolist()
    named = 0
    for row in flagged:
        if len(errors.details) >= MAX_DETAILS:
            break
        name(row, errors)
        named += 1
    if not errors:
        return
    beyond = flagged[named:]
    raise ValidationFailed(
        f"the {items_key} batch has invalid items; nothing was written",
        list(errors.details),
        details_total=errors.total + int(problems[beyond].sum()),
        items=len(errors.items) + len(beyond),
    )


def check_predictions(
    sent: SentPredictions,
    item: Callable[[int], Any],
    *,
    task: str,
    n_classes: int,
    now: datetime,
    cohorts_checked: bool = False,
) -> PredictionBatch:
    """The batch validated (see the module docstring); ``item(row)`` is the row as the JSON
    item the declaration validates. ``ValidationFailed`` names each bad item and field."""
    batch = accept_predictions(sent, task, now, cohorts_checked=cohorts_checked)
    if batch is not None:
        return batch
    declared = PREDICTION_ITEM[task]
    context = {"now": now, "task": task, "n_classes": n_classes}

    def name(row: int, errors: ErrorCollector) -> None:
        collect(declared, item(row), errors, context, path=f"predictions[{row}]", item=row)

    _refuse("predictions", prediction_problems(sent, task, now), name)
    items = [item(row) for row in range(len(sent.ids))]
    return parse_predictions_declared(items, task=task, n_classes=n_classes, now=now)


def parse_predictions_declared(
    items: Sequence[Any], *, task: str, n_classes: int, now: datetime
) -> PredictionBatch:
    """Validate item by item against ``PREDICTION_ITEM``, naming every problem: the reference
    the columnar checks agree with."""
    errors = ErrorCollector()
    declared = PREDICTION_ITEM[task]
    value_key = "logits" if task == Task.MULTICLASS else "score"
    context = {"now": now, "task": task, "n_classes": n_classes}
    ids: list[str] = []
    stamps: list[datetime] = []
    cohorts: list[dict[str, str]] = []
    raw: list[Any] = []
    for i, item in enumerate(items):
        parsed = collect(declared, item, errors, context, path=f"predictions[{i}]", item=i)
        if errors or parsed is None:
            continue
        ids.append(parsed.id)
        stamps.append(parsed.ts)
        cohorts.append(parsed.cohort)
        raw.append(getattr(parsed, value_key))
    errors.raise_if_any("the predictions batch has invalid items; nothing was written")
    return PredictionBatch(
        ids=ids, ts=stamps, cohorts=cohorts, inputs=np.asarray(raw, dtype=np.float64)
    )


def _sent_labels(
    labels: Iterable[Any], index_of: Mapping[str, int], n_classes: int
) -> list[SentLabel] | None:
    """The labels as sent if every one is valid (a known name or an index below ``n_classes``),
    else None."""
    sent = []
    for label in labels:
        if type(label) is int:
            if not 0 <= label < n_classes:
                return None
            sent.append(SentLabel(label))
        elif type(label) is str and label in index_of:
            sent.append(SentLabel(index_of[label], label))
        else:
            return None
    return sent


def accept_labels(
    sent: SentLabels, index_of: Mapping[str, int], n_classes: int, now: datetime
) -> LabelBatch | None:
    """The batch, repeats set apart, if every id, label and time passes, judged whole columns
    at a time, else None."""
    ids = sent.ids
    if sent.shape is not None or not ids or not _clean_ids(ids) or len(sent.stamps) != len(ids):
        return None
    labels = _sent_labels(sent.labels, index_of, n_classes)
    stamps = _in_range(sent.stamps, now)
    if labels is None or stamps is None or len(labels) != len(ids):
        return None
    first: set[str] = set()
    keep: list[int] = []
    repeats: list[tuple[str, SentLabel]] = []
    for i, (ident, label) in enumerate(zip(ids, labels, strict=True)):
        if ident in first:
            repeats.append((ident, label))
        else:
            first.add(ident)
            keep.append(i)
    return LabelBatch(
        ids=[ids[i] for i in keep],
        labels=[labels[i] for i in keep],
        ts=[stamps[i] for i in keep],
        items=keep,
        repeats=repeats,
    )


def label_problems(
    sent: SentLabels, index_of: Mapping[str, int], n_classes: int, now: datetime
) -> np.ndarray:
    """Per row, how many problems the declaration finds in it (see the module docstring)."""
    refused = np.fromiter(
        (not isinstance(sent_label(v, index_of, n_classes), SentLabel) for v in sent.labels),
        bool,
        len(sent.labels),
    )
    fields = _refused_ids(sent.ids).astype(np.int64) + refused + _refused_stamps(sent.stamps, now)
    return fields if sent.shape is None else sent.shape.problems(fields)


def check_labels(
    sent: SentLabels,
    item: Callable[[int], Any],
    *,
    index_of: Mapping[str, int],
    n_classes: int,
    now: datetime,
) -> LabelBatch:
    """The batch validated (see the module docstring) against the class names and indices some
    contract version of the model knows (``label_classes.known_labels``); ``item(row)`` is the
    row as the JSON item the declaration validates."""
    batch = accept_labels(sent, index_of, n_classes, now)
    if batch is not None:
        return batch
    context = {"now": now, "index_of": index_of, "n_classes": n_classes}

    def name(row: int, errors: ErrorCollector) -> None:
        collect(LabelItem, item(row), errors, context, path=f"labels[{row}]", item=row)

    _refuse("labels", label_problems(sent, index_of, n_classes, now), name)
    items = [item(row) for row in range(len(sent.ids))]
    return parse_labels_declared(items, index_of=index_of, n_classes=n_classes, now=now)


def parse_labels_declared(
    items: Sequence[Any], *, index_of: Mapping[str, int], n_classes: int, now: datetime
) -> LabelBatch:
    """Validate item by item against ``LabelItem``, naming every problem: the reference the
    columnar checks agree with."""
    errors = ErrorCollector()
    context = {"now": now, "index_of": index_of, "n_classes": n_classes}
    first: set[str] = set()
    ids: list[str] = []
    labels: list[SentLabel] = []
    stamps: list[datetime] = []
    positions: list[int] = []
    repeats: list[tuple[str, SentLabel]] = []
    for i, item in enumerate(items):
        parsed = collect(LabelItem, item, errors, context, path=f"labels[{i}]", item=i)
        if errors or parsed is None:
            continue
        ident, label = parsed.id, parsed.label
        if ident in first:
            repeats.append((ident, label))
            continue
        first.add(ident)
        ids.append(ident)
        labels.append(label)
        stamps.append(parsed.ts)
        positions.append(i)
    errors.raise_if_any("the labels batch has invalid items; nothing was written")
    return LabelBatch(ids=ids, labels=labels, ts=stamps, items=positions, repeats=repeats)
