"""The contract request bodies: registering (``POST /v1/contracts``) and fitting
(``POST /v1/contracts/fit``), validated field by field with every problem listed.

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
* the baseline: ``service.contracts.baseline_checks``; its NLLs at most ``MAX_NLL`` = 1e9
  nats. No row calmon could measure costs more: logits within +-1e6 at T >= 0.05 give at most
  4e7 + ln K, Platt's bounds at most 1.2e8 (``service.calibration.calibrators``).

These constants are the defaults the settings may later take over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
from service.common.errors import ErrorCollector, LeakageError
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
from service.contracts.baseline_checks import MAX_COST, parse_baseline
from service.contracts.labeled_sets import LabeledSet, parse_labeled_set
from service.contracts.model import (
    TASKS,
    Baseline,
    ContractSpec,
    DataWindow,
    Split,
    method_problem,
)

OBJECTIVES = ("nll",)
DEFAULT_BINARY_CLASSES = ("negative", "positive")
DEFAULT_POLICY = {"max_ece": 0.05, "max_ece_increase": 0.02, "min_labeled": 200}
MAX_CLASSES = 1000
MAX_BIN_EDGES = 101
MIN_COST = 1e-6
MAX_TEXT_LENGTH = 2000
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


def _parse_data_window(value: Any, errors: ErrorCollector, now: datetime) -> DataWindow | None:
    window = expect_object(value, "data_window", errors, required=("start", "end"))
    if window is None:
        return None
    start = expect_timestamp(window.get("start"), "data_window.start", errors, now=now)
    end = expect_timestamp(window.get("end"), "data_window.end", errors, now=now)
    if start is None or end is None:
        return None
    if end < start:
        errors.add("data_window.end", "must not be before data_window.start")
    return DataWindow(format_timestamp(start), format_timestamp(end))


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


def _parse_split(value: Any, errors: ErrorCollector) -> Split | None:
    split = expect_object(
        value,
        "split",
        errors,
        required=("method",),
        optional=("fit_fingerprint", "eval_fingerprint"),
    )
    if split is None:
        return None
    method = expect_str(split.get("method"), "split.method", errors, max_length=MAX_TEXT_LENGTH)
    fit, held_out = (
        _parse_fingerprint(split.get(key), f"split.{key}", errors)
        for key in ("fit_fingerprint", "eval_fingerprint")
    )
    return None if method is None else Split(method, fit, held_out)


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
        else None,
        "split": _parse_split(body.get("split"), errors) if "split" in body else None,
        "bin_edges": _parse_edges(body.get("bin_edges"), errors),
        "policy": parse_policy(body.get("policy"), errors),
    }
    return fields


def parse_calibrator(value: Any, task: str | None, errors: ErrorCollector) -> Calibrator | None:
    """Validate a calibrator object for ``task`` within the parameter bounds a client may set."""
    try:
        calibrator = calibrator_from_dict(value)
        check_bounds(calibrator)
    except CalibrationInputError as exc:
        _calibration_field(errors, "calibrator", exc)
        return None
    problem = method_problem(calibrator.to_dict()["method"], task)
    if problem is not None:
        errors.add("calibrator.method", problem)
    return calibrator


def check_disjoint(split: Split) -> None:
    """Raise ``LeakageError`` when the fit and eval fingerprints are the same rows."""
    if split.fit_fingerprint is not None and split.fit_fingerprint == split.eval_fingerprint:
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
    calibrator = (
        parse_calibrator(body.get("calibrator"), fields["task"], errors)
        if "calibrator" in body
        else None
    )
    baseline = (
        parse_baseline(
            body.get("baseline"),
            errors,
            task=fields["task"],
            n_classes=len(fields["classes"]),
            edges=fields["bin_edges"],
        )
        if "baseline" in body
        else None
    )
    errors.raise_if_any("the contract has invalid fields")
    assert calibrator is not None and baseline is not None
    spec = spec_of(fields, calibrator=calibrator, baseline=Baseline(baseline))
    check_disjoint(spec.split)
    return spec


def spec_of(fields: Mapping[str, Any], **rest: Any) -> ContractSpec:
    """The spec of validated fields (``parse_spec_fields``) and the rest of a contract
    (``calibrator``, ``baseline``, and overrides such as a ``split`` with fingerprints)."""
    values = {**fields, **rest}
    values["policy"] = DriftPolicy.from_dict(values["policy"])
    return ContractSpec(**values)


METHODS = ("temperature", "platt")


@dataclass(frozen=True)
class FitRequest:
    """A validated ``POST /v1/contracts/fit`` body."""

    fields: dict[str, Any]
    method: str
    fit: LabeledSet
    eval: LabeledSet


def parse_fit_request(body: Mapping[str, Any]) -> FitRequest:
    """Validate the body, listing every problem in one ``ValidationFailed``."""
    errors = ErrorCollector()
    expect_object(body, "", errors, required=("method", "fit", "eval"), optional=SPEC_FIELDS)
    fields = parse_spec_fields(body, errors)
    method = (
        expect_str(body.get("method"), "method", errors, choices=METHODS)
        if "method" in body
        else None
    )
    task, classes = fields["task"], fields["classes"]
    problem = None if method is None else method_problem(method, task)
    if problem is not None:
        errors.add("method", f"{problem}; use temperature")
    sets: dict[str, LabeledSet | None] = {}
    for name in ("fit", "eval"):
        sets[name] = (
            parse_labeled_set(body.get(name), name, task=task, classes=classes, errors=errors)
            if task is not None and classes and name in body
            else None
        )
    errors.raise_if_any("the fit request has invalid fields")
    assert method is not None and sets["fit"] is not None and sets["eval"] is not None
    return FitRequest(fields=fields, method=method, fit=sets["fit"], eval=sets["eval"])
