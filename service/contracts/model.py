"""Calibration contracts: parsing and validating their fields, canonical form and content hash.

A contract is immutable once stored. Its ``content_sha256`` is the SHA-256 of the canonical JSON
(sorted keys, no whitespace, UTF-8, shortest round-trip floats) of every field except the hash
itself and the retirement, which is a later event.

Bounds on what a client may register (each refused with a 422 naming the field):

* ``classes``: at most ``MAX_CLASSES`` = 1,000 names (K). Every bucket of a model's statistics
  holds three K x M classwise tables (M bins), so K sets the size of every row written per
  labeled batch and slice; K = 1,000 with the default 15 bins is 45,000 numbers (360 kB) a
  bucket. (ImageNet-21k's K = 21,841 would be 7.9 MB a bucket.) Logit rows of K numbers within
  +-``MAX_ABS_LOGIT`` also keep every statistic finite only for K up to this cap.
* ``bin_edges``: at most ``MAX_BIN_EDGES`` = 101 edges (100 bins): finer bins than 0.01 hold too
  few predictions to read, and M multiplies the bucket size as K does.
* the calibrator's parameters: ``service.calibration.calibrators.check_bounds``.
* the policy: ``max_ece`` and ``max_ece_increase`` in [0, 1]; ``min_labeled`` an integer in
  [0, 2^53 - 1]; the costs ``c_fp``, ``c_fn`` in [``MIN_COST``, ``MAX_COST``] = [1e-6, 1e6]: only
  their ratio sets the threshold, and the bounds keep it and the expected cost finite.
* text (names, checkpoint, population, outcome, split method): valid Unicode without NUL; the
  ``data_window`` within ``service.common.values``'s timestamp range around the time of receipt.
* the baseline: ``parse_baseline``; its NLLs at most ``MAX_NLL`` = 1e9 nats. No row calmon could
  measure costs more: logits within +-1e6 at T >= 0.05 give at most 4e7 + ln K, Platt's bounds
  at most 1.2e8 (``service.calibration.calibrators``).

These constants are the defaults the settings may later take over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np

from service.calibration import (
    CalibrationInputError,
    Calibrator,
    DriftPolicy,
    calibrator_from_dict,
    default_edges,
    validate_edges,
)
from service.calibration.calibrators import check_bounds
from service.calibration.nll_comparison import NllDifference
from service.calibration.readings import Reading
from service.common.errors import ErrorCollector, ErrorDetail, LeakageError, UnreadableContract
from service.common.hashing import sha256_of
from service.common.values import (
    NAME_PATTERN,
    expect_int,
    expect_number,
    expect_object,
    expect_str,
    expect_timestamp,
    finite_float,
    format_timestamp,
)

BaselineSource = Literal["measured", "supplied"]

TASKS = ("multiclass", "binary")
OBJECTIVES = ("nll",)
DEFAULT_BINARY_CLASSES = ("negative", "positive")
DEFAULT_POLICY = {"max_ece": 0.05, "max_ece_increase": 0.02, "min_labeled": 200}
MAX_CLASSES = 1000
MAX_BIN_EDGES = 101
MIN_COST, MAX_COST = 1e-6, 1e6
MAX_TEXT_LENGTH = 2000
MAX_NLL = 1e9
_SHA256_HEX = 64

#: Fields a client supplies, common to registering and fitting.
SPEC_FIELDS = (
    "model",
    "checkpoint",
    "task",
    "classes",
    "objective",
    "population",
    "outcome",
    "data_window",
    "split",
    "bin_edges",
    "policy",
)
_REQUIRED_SPEC_FIELDS = (
    "model",
    "checkpoint",
    "task",
    "population",
    "outcome",
    "data_window",
    "split",
)


@dataclass(frozen=True)
class Retirement:
    reason: str
    retired_at: datetime
    retired_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "retired_at": format_timestamp(self.retired_at),
            "retired_by": self.retired_by,
        }


@dataclass(frozen=True)
class ContractSpec:
    """Validated client-supplied contract fields (everything but the server-assigned ones)."""

    model: str
    checkpoint: str
    task: str
    classes: tuple[str, ...]
    calibrator: dict[str, Any]
    objective: str
    population: str
    outcome: str
    data_window: dict[str, str]
    split: dict[str, Any]
    bin_edges: tuple[float, ...]
    baseline: dict[str, Any]
    policy: dict[str, Any]


@dataclass(frozen=True)
class Contract:
    """A stored contract."""

    id: str
    version: int
    spec: ContractSpec
    created_at: datetime
    created_by: str
    content_sha256: str
    retirement: Retirement | None = None

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def calibrator(self) -> Calibrator:
        return calibrator_from_dict(self.spec.calibrator)

    @property
    def edges(self) -> np.ndarray:
        return np.asarray(self.spec.bin_edges, dtype=np.float64)

    @property
    def policy(self) -> DriftPolicy:
        return DriftPolicy.from_dict(self.spec.policy)

    def baseline_reading(self, split: str = "eval", which: str = "calibrated") -> Reading:
        """One stored baseline reading, read back with the code that validated it.

        A contract stored before registration used that code can hold a baseline it cannot
        read: that is a ``Conflict`` naming the field, never a crash.
        """
        field = f"baseline.{split}.{which}"
        try:
            return Reading.from_dict(self.spec.baseline[split][which], field)
        except (CalibrationInputError, KeyError, TypeError) as exc:
            raise UnreadableContract(
                f"contract {self.id} (version {self.version}) stores a baseline that cannot be "
                "read back; register a new version",
                [ErrorDetail(getattr(exc, "field", field), str(exc))],
            ) from exc

    def hashed_document(self) -> dict[str, Any]:
        return hashed_document(self.id, self.version, self.spec, self.created_at, self.created_by)

    def to_dict(self) -> dict[str, Any]:
        out = self.hashed_document()
        out["content_sha256"] = self.content_sha256
        out["retired"] = self.retirement is not None
        out["retirement"] = None if self.retirement is None else self.retirement.to_dict()
        return out


def hashed_document(
    contract_id: str, version: int, spec: ContractSpec, created_at: datetime, created_by: str
) -> dict[str, Any]:
    """The fields the content hash covers, as JSON-ready values."""
    return {
        "id": contract_id,
        "model": spec.model,
        "version": version,
        "checkpoint": spec.checkpoint,
        "task": spec.task,
        "classes": list(spec.classes),
        "calibrator": spec.calibrator,
        "objective": spec.objective,
        "population": spec.population,
        "outcome": spec.outcome,
        "data_window": spec.data_window,
        "split": spec.split,
        "bin_edges": list(spec.bin_edges),
        "baseline": spec.baseline,
        "policy": spec.policy,
        "created_at": format_timestamp(created_at),
        "created_by": created_by,
    }


def content_sha256(document: Mapping[str, Any]) -> str:
    """The SHA-256 of a contract's hashed document (``hashed_document``)."""
    return sha256_of(document)


def _calibration_field(errors: ErrorCollector, field: str, exc: CalibrationInputError) -> None:
    name = exc.field or ""
    errors.add(name if name.startswith(field) else f"{field}.{name}".rstrip("."), exc.message)


def _parse_classes(value: Any, task: str | None, errors: ErrorCollector) -> tuple[str, ...]:
    if value is None:
        if task == "multiclass":
            errors.add("classes", "required for a multiclass contract (K >= 2 class names)")
        return DEFAULT_BINARY_CLASSES
    if not isinstance(value, list):
        errors.add("classes", "expected a list of class names")
        return ()
    if len(value) > MAX_CLASSES:
        errors.add("classes", f"at most {MAX_CLASSES} classes (K), got {len(value)}")
        return ()
    names = tuple(
        n for i, v in enumerate(value) if (n := expect_str(v, f"classes[{i}]", errors)) is not None
    )
    if len(names) != len(value):
        return ()
    if len(set(names)) != len(names):
        errors.add("classes", "class names must be unique")
    if task == "multiclass" and len(names) < 2:
        errors.add("classes", f"a multiclass contract needs K >= 2 classes, got {len(names)}")
    if task == "binary" and len(names) != 2:
        errors.add("classes", "a binary contract has exactly two classes [negative, positive]")
    return names


def _parse_data_window(value: Any, errors: ErrorCollector, now: datetime) -> dict[str, str]:
    window = expect_object(value, "data_window", errors, required=("start", "end"))
    if window is None:
        return {}
    start = expect_timestamp(window.get("start"), "data_window.start", errors, now=now)
    end = expect_timestamp(window.get("end"), "data_window.end", errors, now=now)
    if start is None or end is None:
        return {}
    if end < start:
        errors.add("data_window.end", "must not be before data_window.start")
    return {"start": format_timestamp(start), "end": format_timestamp(end)}


def _parse_fingerprint(value: Any, path: str, errors: ErrorCollector) -> str | None:
    if value is None:
        return None
    text = expect_str(value, path, errors, max_length=_SHA256_HEX)
    if text is None:
        return None
    hex_part = text.lower()
    if len(hex_part) != _SHA256_HEX or any(c not in "0123456789abcdef" for c in hex_part):
        errors.add(path, "expected a SHA-256 as 64 hexadecimal characters")
        return None
    return hex_part


def _parse_split(value: Any, errors: ErrorCollector) -> dict[str, Any]:
    split = expect_object(
        value,
        "split",
        errors,
        required=("method",),
        optional=("fit_fingerprint", "eval_fingerprint"),
    )
    if split is None:
        return {}
    out: dict[str, Any] = {
        "method": expect_str(
            split.get("method"), "split.method", errors, max_length=MAX_TEXT_LENGTH
        )
    }
    for key in ("fit_fingerprint", "eval_fingerprint"):
        out[key] = _parse_fingerprint(split.get(key), f"split.{key}", errors)
    return out


def _parse_edges(value: Any, errors: ErrorCollector) -> tuple[float, ...]:
    if value is None:
        return tuple(float(e) for e in default_edges())
    if not isinstance(value, list):
        errors.add("bin_edges", "expected a list of numbers")
        return ()
    if len(value) > MAX_BIN_EDGES:
        errors.add("bin_edges", f"at most {MAX_BIN_EDGES} edges, got {len(value)}")
        return ()
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or finite_float(v) is None:
            errors.add(f"bin_edges[{i}]", "expected a finite number")
            return ()
    try:
        return tuple(float(e) for e in validate_edges(np.asarray(value, dtype=np.float64)))
    except CalibrationInputError as exc:
        errors.add("bin_edges", str(exc))
        return ()


def parse_policy(value: Any, errors: ErrorCollector, path: str = "policy") -> dict[str, Any]:
    """Validate a drift policy (defaults fill missing thresholds); return its stored form."""
    if value is None:
        return dict(DEFAULT_POLICY)
    policy = expect_object(
        value, path, errors, optional=("max_ece", "max_ece_increase", "min_labeled", "c_fp", "c_fn")
    )
    if policy is None:
        return {}
    merged = {**DEFAULT_POLICY, **policy}
    out: dict[str, Any] = {
        "max_ece": expect_number(
            merged["max_ece"], f"{path}.max_ece", errors, minimum=0, maximum=1
        ),
        "max_ece_increase": expect_number(
            merged["max_ece_increase"], f"{path}.max_ece_increase", errors, minimum=0, maximum=1
        ),
        "min_labeled": expect_int(merged["min_labeled"], f"{path}.min_labeled", errors, minimum=0),
    }
    if ("c_fp" in policy) != ("c_fn" in policy):
        errors.add(f"{path}.c_fp", "set both c_fp and c_fn, or neither")
    for key in ("c_fp", "c_fn"):
        if key in policy:
            out[key] = expect_number(
                policy[key], f"{path}.{key}", errors, minimum=MIN_COST, maximum=MAX_COST
            )
    return out


def parse_spec_fields(
    body: Mapping[str, Any], errors: ErrorCollector, now: datetime | None = None
) -> dict[str, Any]:
    """Validate the client-supplied fields shared by register and fit; record every problem.

    ``now`` is the time of receipt the data window is checked against (default: the current
    time)."""
    now = now or datetime.now(UTC)
    for key in _REQUIRED_SPEC_FIELDS:
        if key not in body:
            errors.add(key, "required field is missing")
    task = expect_str(body.get("task"), "task", errors, choices=TASKS) if "task" in body else None
    fields: dict[str, Any] = {
        "model": expect_str(body.get("model"), "model", errors, pattern=NAME_PATTERN)
        if "model" in body
        else None,
        "checkpoint": expect_str(body.get("checkpoint"), "checkpoint", errors)
        if "checkpoint" in body
        else None,
        "task": task,
        "classes": _parse_classes(body.get("classes"), task, errors),
        "objective": expect_str(
            body.get("objective", "nll"), "objective", errors, choices=OBJECTIVES
        ),
        "population": expect_str(
            body.get("population"), "population", errors, max_length=MAX_TEXT_LENGTH
        )
        if "population" in body
        else None,
        "outcome": expect_str(body.get("outcome"), "outcome", errors, max_length=MAX_TEXT_LENGTH)
        if "outcome" in body
        else None,
        "data_window": _parse_data_window(body.get("data_window"), errors, now)
        if "data_window" in body
        else {},
        "split": _parse_split(body.get("split"), errors) if "split" in body else {},
        "bin_edges": _parse_edges(body.get("bin_edges"), errors),
        "policy": parse_policy(body.get("policy"), errors),
    }
    return fields


def parse_calibrator(value: Any, task: str | None, errors: ErrorCollector) -> dict[str, Any]:
    """Validate a calibrator object for ``task`` within the parameter bounds a client may set;
    return its canonical dict."""
    try:
        calibrator = calibrator_from_dict(value)
        check_bounds(calibrator)
    except CalibrationInputError as exc:
        _calibration_field(errors, "calibrator", exc)
        return {}
    as_dict = calibrator.to_dict()
    if as_dict["method"] == "platt" and task == "multiclass":
        errors.add("calibrator.method", "platt scaling is for binary contracts only")
    return as_dict


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
    before = len(errors.details)
    if task == "binary":
        for key in _BINARY_READING_KEYS:
            if key not in value:
                errors.add(f"{path}.{key}", "is required in a binary reading (null if unknown)")
    else:
        for key in _BINARY_ONLY_KEYS:
            if key in value:
                errors.add(f"{path}.{key}", "is a field of binary readings only")
    return len(errors.details) == before


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
    _check_range(reading.brier, f"{path}.brier", errors, 0, 1 if task == "binary" else 2)
    lower, upper = reading.ece_ci
    if not 0 <= lower <= upper <= 1:
        errors.add(f"{path}.ece_ci", "must be [lower, upper] with 0 <= lower <= upper <= 1")
    for key in ("mce", "ece_debiased", "calibration_p_value"):
        _check_range(getattr(reading, key), f"{path}.{key}", errors, 0, 1, nullable=True)
    if reading.mce_n is not None and not 1 <= reading.mce_n <= reading.n:
        errors.add(f"{path}.mce_n", f"must lie in [1, n = {reading.n}] or be null")
    if task == "binary":
        _check_range(reading.auc, f"{path}.auc", errors, 0, 1, nullable=True)
        for key in ("prevalence", "mean_score", "threshold"):
            _check_range(getattr(reading, key), f"{path}.{key}", errors, 0, 1)
        _check_range(
            reading.expected_cost, f"{path}.expected_cost", errors, 0, MAX_COST, nullable=True
        )
    else:
        _check_range(reading.classwise_ece, f"{path}.classwise_ece", errors, 0, 2, nullable=True)
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
      [0, 1], or null when no bin holds ``MCE_MIN_ROWS`` rows;
    * ``label_counts``: K counts adding up to n;
    * ``bins``: the non-empty bins in the order of ``bin_edges``, each with ``lo`` and ``hi`` two
      consecutive edges, ``n`` >= 1 (adding up to the reading's n), ``mean_confidence`` and
      ``accuracy`` in [0, 1], ``ci`` as [lower, upper] within [0, 1];
    * binary readings: ``auc`` (null when a class is absent), ``prevalence``, ``mean_score`` and
      ``threshold`` in [0, 1]; multiclass readings have none of the binary keys.

    Optional: ``ece_debiased`` and ``calibration_p_value`` in [0, 1] (recomputed from the bins
    when either is absent), ``mce_n`` in [1, n], ``classwise_ece`` (multiclass, in [0, 2]),
    ``expected_cost`` (binary, in [0, MAX_COST]); each may be null where the reading had no
    value. ``nll_difference`` is ``NllDifference``'s form over the n rows of the split, its mean
    and sd within MAX_NLL. Both readings of a split are of the same rows: same n, same label
    counts. The baseline is stored as given: everything accepted here reads back.
    """
    baseline = expect_object(value, "baseline", errors, required=("fit", "eval"))
    if baseline is None or task is None:
        return {}
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
    return dict(baseline)


def check_disjoint(split: Mapping[str, Any]) -> None:
    """Raise ``LeakageError`` when the fit and eval fingerprints are the same rows."""
    fit, held_out = split.get("fit_fingerprint"), split.get("eval_fingerprint")
    if fit is not None and fit == held_out:
        raise LeakageError(
            "the fit and eval sets have the same fingerprint: the held-out evidence would be "
            "measured on the rows the calibrator was fitted on",
            [],
        )


def parse_registration(body: Mapping[str, Any], now: datetime | None = None) -> ContractSpec:
    """Validate a ``POST /v1/contracts`` body into a spec, or raise listing every problem.

    ``now`` is the time of receipt (default: the current time)."""
    errors = ErrorCollector()
    expect_object(body, "", errors, required=("calibrator", "baseline"), optional=SPEC_FIELDS)
    fields = parse_spec_fields(body, errors, now)
    fields["calibrator"] = (
        parse_calibrator(body.get("calibrator"), fields["task"], errors)
        if "calibrator" in body
        else {}
    )
    fields["baseline"] = (
        parse_baseline(
            body.get("baseline"),
            errors,
            task=fields["task"],
            n_classes=len(fields["classes"]),
            edges=fields["bin_edges"],
        )
        if "baseline" in body
        else {}
    )
    errors.raise_if_any("the contract has invalid fields")
    spec = ContractSpec(**fields)
    check_disjoint(spec.split)
    return spec
