"""The checks of a registered baseline: each reading read as calmon reads it back, then checked
against the contract (task, classes, bin edges) and the bounds of its numbers; what they accept
is then validated by ``BaselineBody``, the declaration whose JSON Schema the OpenAPI document
serves."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

from annotated_types import Len
from pydantic import Field, WithJsonSchema

from service.calibration import CalibrationInputError
from service.calibration.nll_comparison import NllDifference
from service.calibration.readings import Reading
from service.calibration.vocabulary import Task
from service.common.declared import (
    FINITE,
    JSON_INTEGER,
    NO_INF_NAN,
    BodyModel,
    Fraction,
    collect,
    integer_in,
    number_in,
)
from service.common.errors import ErrorCollector
from service.common.values import expect_object
from service.contracts.model import MAX_BIN_EDGES, MAX_CLASSES
from service.contracts.selection_checks import SELECTION_SCHEMA, check_selection

#: Largest NLL a baseline may state, in nats (``service.contracts.requests``).
MAX_NLL = 1e9
#: Largest expected cost a binary baseline may state: the largest cost a policy may set.
MAX_COST = 1e6

#: A count of labeled predictions: at least one.
Count = Annotated[int, integer_in(1), JSON_INTEGER]
#: A count that may be nought (a class absent from the rows).
LabelCount = Annotated[int, integer_in(0), JSON_INTEGER]
#: ``[lower, upper]`` within [0, 1] (the order is checked by ``parse_baseline``).
ConfidenceInterval = Annotated[list[Fraction], Len(2, 2)]
Nll = Annotated[float, NO_INF_NAN, number_in(0, MAX_NLL), FINITE]
NllChange = Annotated[float, NO_INF_NAN, number_in(-MAX_NLL, MAX_NLL), FINITE]
#: A binary brier score lies in [0, 1], a multiclass one (and a classwise ECE) in [0, 2].
UpToTwo = Annotated[float, NO_INF_NAN, number_in(0, 2), FINITE]
Cost = Annotated[float, NO_INF_NAN, number_in(0, MAX_COST), FINITE]


class BinBody(BodyModel):
    """A listed (non-empty) bin of a reading: ``lo`` and ``hi`` two consecutive bin edges."""

    lo: Fraction
    hi: Fraction
    n: Count
    mean_confidence: Fraction
    accuracy: Fraction
    ci: ConfidenceInterval


Bins = Annotated[list[BinBody], Len(0, MAX_BIN_EDGES - 1)]


class PositiveClassBody(BodyModel):
    """The positive-class view of a two-class multiclass reading."""

    ece: Fraction
    ece_debiased: Fraction | None
    ece_ci: ConfidenceInterval
    calibration_p_value: Fraction | None
    bins: Bins


class ReadingBody(BodyModel):
    """A reading as registered: the keys of both tasks (``parse_baseline`` states the rules a
    schema cannot: bins on consecutive edges adding up to n, K label counts, the keys of the
    contract's task). Absent optional keys stand for values recomputed or unknown; ``null``
    where the reading had no value."""

    n: Count
    ece: Fraction
    ece_debiased: Fraction | None = None
    ece_ci: ConfidenceInterval
    calibration_p_value: Fraction | None = None
    mce: Fraction | None
    mce_n: Annotated[int, integer_in(), JSON_INTEGER] | None = None
    mce_supported: Fraction | None = None
    mce_supported_n: Annotated[int, integer_in(), JSON_INTEGER] | None = None
    # Absent or a count: null is refused.
    mce_min_rows: Annotated[Count, Field(default=None)]
    nll: Nll
    brier: UpToTwo
    accuracy: Fraction
    mean_confidence: Fraction
    bins: Bins
    label_counts: Annotated[list[LabelCount], Len(2, MAX_CLASSES)]
    classwise_ece: UpToTwo | None = None
    positive_class: PositiveClassBody | None = None
    auc: Fraction | None = None
    prevalence: Fraction | None = None
    mean_score: Fraction | None = None
    threshold: Fraction | None = None
    expected_cost: Cost | None = None


class NllDifferenceBody(BodyModel):
    """``NllDifference``'s form over the n rows of a split."""

    n: Count
    mean: NllChange
    sd: Nll
    lower_bound: NllChange | None = None


class SplitReadingsBody(BodyModel):
    """The readings of one split, uncalibrated and calibrated, of the same rows."""

    uncalibrated: ReadingBody
    calibrated: ReadingBody
    # Absent or an object: null is refused.
    nll_difference: Annotated[NllDifferenceBody, Field(default=None)]


class BaselineBody(BodyModel):
    """``{"fit"|"eval": {"uncalibrated": R, "calibrated": R, "nll_difference"?: D},
    "selection"?: S}``: the shape of a baseline and the bounds of its numbers, checked after
    ``parse_baseline``'s rules (which report a problem first when both would)."""

    fit: SplitReadingsBody
    eval: SplitReadingsBody
    # The evidence of a ``method: auto`` fit, checked by ``check_selection``.
    selection: Annotated[Any, WithJsonSchema(SELECTION_SCHEMA), Field(default=None)]


_BINARY_READING_KEYS = ("auc", "prevalence", "mean_score", "threshold")
_BINARY_ONLY_KEYS = (*_BINARY_READING_KEYS, "expected_cost")


def _check_range(
    value: float | None,
    path: str,
    errors: ErrorCollector,
    low: float,
    high: float = math.inf,
    *,
    nullable: bool = False,
) -> None:
    """Record ``path`` unless ``value`` lies in [low, high]; NaN and None stand for null."""
    if value is None or math.isnan(value):
        if not nullable:
            errors.add(path, "must be a number, not null")
    elif not low <= value <= high:
        errors.add(path, f"must lie in [{low:g}, {high:g}]")


def _check_task_keys(value: Any, path: str, task: str, errors: ErrorCollector) -> bool:
    """Whether a reading's keys are those of its contract's task (the reader tells the task of
    a stored reading by its keys: a binary one has ``auc``)."""
    if not isinstance(value, Mapping):
        return True
    before = errors.total
    if task == Task.BINARY:
        for key in _BINARY_READING_KEYS:
            if key not in value:
                errors.add(f"{path}.{key}", "is required in a binary reading (null if unknown)")
    else:
        for key in _BINARY_ONLY_KEYS:
            if key in value:
                errors.add(f"{path}.{key}", "is a field of binary readings only")
    return errors.total == before


def _check_bins(
    reading: Reading, path: str, edges: tuple[float, ...], errors: ErrorCollector
) -> None:
    position = {edge: m for m, edge in enumerate(edges[:-1])}
    last = -1
    for i, b in enumerate(reading.bins):
        bpath = f"{path}.bins[{i}]"
        m = position.get(b.lo)
        if edges and (m is None or b.hi != edges[m + 1]):
            lo_is_edge, hi_is_edge = m is not None, b.hi in edges[1:]
            for key, blamed in (("lo", lo_is_edge), ("hi", hi_is_edge)):
                if not blamed or (lo_is_edge and hi_is_edge):
                    errors.add(f"{bpath}.{key}", "lo and hi must be two consecutive bin_edges")
            continue
        if m is not None and m <= last:
            errors.add(bpath, "bins are listed once each, in the order of bin_edges")
        last = m if m is not None else last
        if b.n < 1:
            errors.add(f"{bpath}.n", "a listed bin holds at least one prediction")
        _check_range(b.mean_confidence, f"{bpath}.mean_confidence", errors, 0, 1)
        _check_range(b.accuracy, f"{bpath}.accuracy", errors, 0, 1)
        if not 0 <= b.ci_lower <= b.ci_upper <= 1:
            errors.add(f"{bpath}.ci", "must be [lower, upper] with 0 <= lower <= upper <= 1")
    total = sum(b.n for b in reading.bins)
    if total != reading.n:
        errors.add(f"{path}.bins", f"bin counts add up to {total}, not n = {reading.n}")


def _parse_reading(
    value: Any,
    path: str,
    *,
    task: str,
    n_classes: int,
    edges: tuple[float, ...],
    errors: ErrorCollector,
) -> Reading | None:
    """One baseline reading: ``Reading.from_dict``, then the checks against the contract."""
    if not _check_task_keys(value, path, task, errors):
        return None
    try:
        reading = Reading.from_dict(value, path)
    except CalibrationInputError as exc:
        errors.add(exc.field, exc.message)
        return None
    if reading.n < 1:
        errors.add(f"{path}.n", "a baseline is measured on at least one labeled prediction")
        return None
    for key in ("ece", "accuracy", "mean_confidence"):
        _check_range(getattr(reading, key), f"{path}.{key}", errors, 0, 1)
    _check_range(reading.nll, f"{path}.nll", errors, 0, MAX_NLL)
    _check_range(reading.brier, f"{path}.brier", errors, 0, 1 if task == Task.BINARY else 2)
    lower, upper = reading.ece_ci
    if not 0 <= lower <= upper <= 1:
        errors.add(f"{path}.ece_ci", "must be [lower, upper] with 0 <= lower <= upper <= 1")
    for key in ("mce", "mce_supported", "ece_debiased", "calibration_p_value"):
        _check_range(getattr(reading, key), f"{path}.{key}", errors, 0, 1, nullable=True)
    for key in ("mce_n", "mce_supported_n"):
        count = getattr(reading, key)
        if count is not None and not 1 <= count <= reading.n:
            errors.add(f"{path}.{key}", f"must lie in [1, n = {reading.n}] or be null")
    if task == Task.BINARY:
        _check_range(reading.auc, f"{path}.auc", errors, 0, 1, nullable=True)
        for key in ("prevalence", "mean_score", "threshold"):
            _check_range(getattr(reading, key), f"{path}.{key}", errors, 0, 1)
        _check_range(
            reading.expected_cost, f"{path}.expected_cost", errors, 0, MAX_COST, nullable=True
        )
    else:
        _check_range(reading.classwise_ece, f"{path}.classwise_ece", errors, 0, 2, nullable=True)
        view = reading.positive_class
        if view is not None and n_classes != 2:
            errors.add(f"{path}.positive_class", "belongs to two-class contracts only")
        elif view is not None:
            _check_range(view.ece, f"{path}.positive_class.ece", errors, 0, 1)
            _check_bins(replace(reading, bins=view.bins), f"{path}.positive_class", edges, errors)
    if n_classes and len(reading.label_counts) != n_classes:
        errors.add(f"{path}.label_counts", f"must list K = {n_classes} counts")
    elif sum(reading.label_counts) != reading.n:
        errors.add(f"{path}.label_counts", f"must add up to n = {reading.n}")
    _check_bins(reading, path, edges, errors)
    return reading


def parse_baseline(
    value: Any,
    errors: ErrorCollector,
    *,
    task: str | None,
    n_classes: int,
    edges: tuple[float, ...],
) -> dict[str, Any]:
    """Validate ``{"fit"|"eval": {"uncalibrated": R, "calibrated": R, "nll_difference"?: D}}``.

    A reading R is read with ``Reading.from_dict``, the code that reads it back for every later
    reading, gate and page of the contract, and then checked against the contract. Required:

    * ``n`` >= 1; ``ece``, ``accuracy``, ``mean_confidence`` in [0, 1]; ``nll`` in [0, MAX_NLL];
      ``brier`` in [0, 2] (binary [0, 1]); ``ece_ci`` as [lower, upper] within [0, 1]; ``mce`` in
      [0, 1] (the largest gap over every non-empty bin), or null;
    * ``label_counts``: K counts adding up to n;
    * ``bins``: the non-empty bins in the order of ``bin_edges``, each with ``lo`` and ``hi`` two
      consecutive edges, ``n`` >= 1 (adding up to the reading's n), ``mean_confidence`` and
      ``accuracy`` in [0, 1], ``ci`` as [lower, upper] within [0, 1];
    * binary readings: ``auc`` (null when a class is absent), ``prevalence``, ``mean_score`` and
      ``threshold`` in [0, 1]; multiclass readings have none of the binary keys.

    Optional: ``ece_debiased`` and ``calibration_p_value`` in [0, 1] (recomputed from the bins
    when either is absent), ``mce_n`` in [1, n]; ``mce_supported`` in [0, 1] or null
    (the largest gap among bins of at least ``mce_min_rows`` >= 1 rows) with
    ``mce_supported_n`` in [1, n] (a reading without ``mce_supported`` is read as one whose
    ``mce`` and ``mce_n`` name that variant at 50 rows, and gets ``mce`` from its bins),
    ``classwise_ece`` (multiclass, in [0, 2]),
    ``expected_cost`` (binary, in [0, MAX_COST]); each may be null where the reading had no
    value; ``positive_class`` (two-class multiclass only) with bins on the edges adding up to n.
    ``nll_difference`` is ``NllDifference``'s form over the n rows of the split, its mean, sd
    and (optional) bootstrap-t lower bound within MAX_NLL. Both readings of a split are of the
    same rows: same n, same label counts. The baseline is stored as given: everything accepted
    here reads back. What these rules accept is then validated by ``BaselineBody``, the
    declaration whose JSON Schema the OpenAPI document serves.
    """
    before = errors.total
    baseline = expect_object(
        value, "baseline", errors, required=("fit", "eval"), optional=("selection",)
    )
    if baseline is None or task is None:
        return {}
    if "selection" in baseline:
        check_selection(baseline["selection"], errors)
    for split in ("fit", "eval"):
        path = f"baseline.{split}"
        part = expect_object(
            baseline.get(split),
            path,
            errors,
            required=("uncalibrated", "calibrated"),
            optional=("nll_difference",),
        )
        if part is None:
            continue
        readings = {
            which: _parse_reading(
                part[which],
                f"{path}.{which}",
                task=task,
                n_classes=n_classes,
                edges=edges,
                errors=errors,
            )
            for which in ("uncalibrated", "calibrated")
            if which in part
        }
        calibrated, uncalibrated = readings.get("calibrated"), readings.get("uncalibrated")
        if calibrated is not None and uncalibrated is not None:
            if uncalibrated.n != calibrated.n:
                errors.add(f"{path}.uncalibrated.n", "must equal the calibrated reading's n")
            elif uncalibrated.label_counts != calibrated.label_counts:
                errors.add(
                    f"{path}.uncalibrated.label_counts",
                    "must equal the calibrated reading's label_counts",
                )
        if "nll_difference" in part:
            try:
                difference = NllDifference.from_dict(
                    part["nll_difference"], f"{path}.nll_difference"
                )
            except CalibrationInputError as exc:
                errors.add(exc.field, exc.message)
                continue
            if calibrated is not None and difference.n != calibrated.n:
                errors.add(f"{path}.nll_difference.n", f"must equal the split's n = {calibrated.n}")
            _check_range(difference.mean, f"{path}.nll_difference.mean", errors, -MAX_NLL, MAX_NLL)
            _check_range(difference.sd, f"{path}.nll_difference.sd", errors, 0, MAX_NLL)
            if difference.lower_bound is not None:
                _check_range(
                    difference.lower_bound,
                    f"{path}.nll_difference.lower_bound",
                    errors,
                    -MAX_NLL,
                    MAX_NLL,
                )
    if errors.total == before:
        collect(BaselineBody, baseline, errors, {}, path="baseline")
    return dict(baseline)
