"""The contract request bodies: registering (``POST /v1/contracts``) and fitting
(``POST /v1/contracts/fit``), validated field by field with every problem listed.

Bounds on what a client may register (each refused with a 422 naming the field):

* ``classes``: at most ``MAX_CLASSES`` = 1,000 names (K). Every bucket of a model's statistics
  holds the K label counts, and three K x M classwise tables (M bins) while K M <= 1,500
  (``service.calibration.packing.CLASSWISE_MAX_CELLS``), so K sets the size of every row
  written per labeled batch and slice: 12 kB at K = 1,000 and 100 bins. Logit rows of K numbers
  within +-``MAX_ABS_LOGIT`` also keep every statistic finite only for K up to this cap.
* ``bin_edges``: at most ``MAX_BIN_EDGES`` = 101 edges (100 bins): finer bins than 0.01 hold too
  few predictions to read, and M multiplies the bucket size as K does.
* the calibrator's parameters: ``service.calibration.calibrators.check_bounds`` and the
  bounds of the families (``binary_families``, ``multiclass_families``); sizes tied to K.
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
    DriftPolicy,
    calibrator_from_dict,
    default_edges,
    validate_edges,
)
from service.calibration.calibrators import (
    MAX_PLATT_INTERCEPT,
    MAX_PLATT_SLOPE,
    MAX_TEMPERATURE,
    MIN_PLATT_SLOPE,
    MIN_TEMPERATURE,
    check_bounds,
    task_problem,
)
from service.calibration.families_schema import FAMILY_SCHEMAS
from service.common.errors import ErrorCollector, LeakageError
from service.common.fields import (
    Body,
    Context,
    Custom,
    Field,
    Integer,
    Number,
    Obj,
    Text,
    Timestamp,
)
from service.common.values import NAME_PATTERN, expect_str, finite_float, format_timestamp
from service.contracts.baseline_checks import BASELINE_SCHEMA, MAX_COST, parse_baseline
from service.contracts.labeled_sets import LABELED_SET_SCHEMA, LabeledSet, parse_labeled_set
from service.contracts.model import (
    FIT_METHODS,
    MAX_BIN_EDGES,
    MAX_CLASSES,
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
MIN_COST = 1e-6
MAX_TEXT_LENGTH = 2000
_SHA256_HEX = 64

_FINGERPRINT_SCHEMA = {"type": ["string", "null"], "pattern": "^[0-9a-fA-F]{64}$"}


def _calibration_field(errors: ErrorCollector, field: str, exc: CalibrationInputError) -> None:
    name = exc.field or ""
    errors.add(name if name.startswith(field) else f"{field}.{name}".rstrip("."), exc.message)


def _classes(value: Any, path: str, errors: ErrorCollector, context: Context) -> tuple[str, ...]:
    """K unique class names; a binary contract defaults to ``[negative, positive]``."""
    task = context.values.get("task")
    if value is None:
        if task == "multiclass":
            errors.add(path, "required for a multiclass contract (K >= 2 class names)")
        return DEFAULT_BINARY_CLASSES
    if not isinstance(value, list):
        errors.add(path, "expected a list of class names")
        return ()
    if len(value) > MAX_CLASSES:
        errors.add(path, f"at most {MAX_CLASSES} classes (K), got {len(value)}")
        return ()
    names = tuple(
        n for i, v in enumerate(value) if (n := expect_str(v, f"{path}[{i}]", errors)) is not None
    )
    if len(names) != len(value):
        return ()
    if len(set(names)) != len(names):
        errors.add(path, "class names must be unique")
    if task == "multiclass" and len(names) < 2:
        errors.add(path, f"a multiclass contract needs K >= 2 classes, got {len(names)}")
    if task == "binary" and len(names) != 2:
        errors.add(path, "a binary contract has exactly two classes [negative, positive]")
    return names


_DATA_WINDOW = Obj({"start": Timestamp(), "end": Timestamp()}, required=("start", "end"))


def _data_window(value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
    window = _DATA_WINDOW.parse(value, path, errors, context)
    if window is None or window.get("start") is None or window.get("end") is None:
        return None
    start, end = window["start"], window["end"]
    if end < start:
        errors.add(f"{path}.end", f"must not be before {path}.start")
    return DataWindow(format_timestamp(start), format_timestamp(end))


def _fingerprint(value: Any, path: str, errors: ErrorCollector, context: Context) -> str | None:
    """A SHA-256 as 64 hexadecimal characters (stored lower-case), or null."""
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


_SPLIT = Obj(
    {
        "method": Text(max_length=MAX_TEXT_LENGTH),
        "fit_fingerprint": Custom(_fingerprint, _FINGERPRINT_SCHEMA, nullable=True),
        "eval_fingerprint": Custom(_fingerprint, _FINGERPRINT_SCHEMA, nullable=True),
    },
    required=("method",),
)


def _split(value: Any, path: str, errors: ErrorCollector, context: Context) -> Split | None:
    split = _SPLIT.parse(value, path, errors, context)
    if split is None or split.get("method") is None:
        return None
    return Split(split["method"], split.get("fit_fingerprint"), split.get("eval_fingerprint"))


@dataclass(frozen=True)
class EqualMass:
    """``{"equal_mass": M}`` in a fit request: M bins of equal mass, their edges fixed at fit
    time from the fit set's calibrated confidences (``contracts.fitting.equal_mass_edges``)."""

    bins: int


_EQUAL_MASS = Obj({"equal_mass": Integer(1, MAX_BIN_EDGES - 1)}, required=("equal_mass",))


def _edges(
    value: Any, path: str, errors: ErrorCollector, context: Context
) -> tuple[float, ...] | EqualMass:
    """Strictly increasing from 0 to 1, at most ``MAX_BIN_EDGES``; default 15 equal bins; or,
    in a fit request, ``{"equal_mass": M}`` with M in [1, MAX_BIN_EDGES - 1]."""
    if value is None:
        return tuple(float(e) for e in default_edges())
    if isinstance(value, dict):
        parsed = _EQUAL_MASS.parse(value, path, errors, context)
        if parsed is None or parsed.get("equal_mass") is None:
            return ()
        return EqualMass(int(parsed["equal_mass"]))
    if not isinstance(value, list):
        errors.add(path, "expected a list of numbers")
        return ()
    if len(value) > MAX_BIN_EDGES:
        errors.add(path, f"at most {MAX_BIN_EDGES} edges, got {len(value)}")
        return ()
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or finite_float(v) is None:
            errors.add(f"{path}[{i}]", "expected a finite number")
            return ()
    try:
        return tuple(float(e) for e in validate_edges(np.asarray(value, dtype=np.float64)))
    except CalibrationInputError as exc:
        errors.add(path, str(exc))
        return ()


#: A drift policy; absent thresholds take ``DEFAULT_POLICY``'s values.
DRIFT_POLICY = Obj(
    {
        "max_ece": Number(0, 1, default=DEFAULT_POLICY["max_ece"]),
        "max_ece_increase": Number(0, 1, default=DEFAULT_POLICY["max_ece_increase"]),
        "min_labeled": Integer(0, default=DEFAULT_POLICY["min_labeled"]),
        "c_fp": Number(MIN_COST, MAX_COST),
        "c_fn": Number(MIN_COST, MAX_COST),
    }
)


def _policy(value: Any, path: str, errors: ErrorCollector, context: Context) -> dict[str, Any]:
    """A drift policy's stored form; ``null`` or absent is every default."""
    policy = DRIFT_POLICY.parse_or(DEFAULT_POLICY, value, path, errors, context)
    if isinstance(value, dict) and ("c_fp" in value) != ("c_fn" in value):
        errors.add(f"{path}.c_fp", "set both c_fp and c_fn, or neither")
    return policy


def parse_policy(value: Any, errors: ErrorCollector, path: str = "policy") -> dict[str, Any]:
    """Validate a drift policy (defaults fill missing thresholds); return its stored form."""
    return _policy(value, path, errors, Context(datetime.now(UTC)))


def _calibrator(value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
    """A calibrator for the contract's task within the parameter bounds a client may set."""
    task, classes = context.values.get("task"), context.values.get("classes")
    try:
        calibrator = calibrator_from_dict(value, len(classes) if classes else None)
        check_bounds(calibrator)
    except CalibrationInputError as exc:
        _calibration_field(errors, path, exc)
        return None
    problem = task_problem(calibrator, task)
    if problem is not None:
        errors.add(*problem)
    if task == "multiclass" and not classes:
        return None
    return calibrator


CALIBRATOR_SCHEMA: dict[str, Any] = {
    "oneOf": [
        Obj(
            {
                "method": Text(choices=("temperature",)),
                "temperature": Number(MIN_TEMPERATURE, MAX_TEMPERATURE),
            },
            required=("method", "temperature"),
        ).schema(),
        Obj(
            {
                "method": Text(choices=("platt",)),
                "slope": Number(MIN_PLATT_SLOPE, MAX_PLATT_SLOPE),
                "intercept": Number(-MAX_PLATT_INTERCEPT, MAX_PLATT_INTERCEPT),
            },
            required=("method", "slope", "intercept"),
        ).schema(),
        Obj({"method": Text(choices=("identity",))}, required=("method",)).schema(),
        *FAMILY_SCHEMAS,
    ]
}


def _baseline(value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
    values = context.values
    if values.get("task") is None:
        return None
    if isinstance(values.get("bin_edges"), EqualMass):
        errors.add("bin_edges", "equal_mass edges are fixed by a fit request; list the edges")
        return None
    return parse_baseline(
        value,
        errors,
        task=values["task"],
        n_classes=len(values.get("classes") or ()),
        edges=values.get("bin_edges") or (),
    )


def _labeled_set(value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
    task, classes = context.values.get("task"), context.values.get("classes")
    if task is None or not classes:
        return None
    return parse_labeled_set(value, path, task=task, classes=classes, errors=errors)


#: The fields a client supplies, common to registering and fitting, in the order they are read.
SPEC: dict[str, Field] = {
    "model": Text(pattern=NAME_PATTERN),
    "checkpoint": Text(),
    "task": Text(choices=TASKS),
    "classes": Custom(
        _classes,
        {
            "type": "array",
            "minItems": 2,
            "maxItems": MAX_CLASSES,
            "uniqueItems": True,
            "items": Text().schema(),
        },
        nullable=True,
    ),
    "objective": Text(choices=OBJECTIVES, default="nll"),
    "population": Text(max_length=MAX_TEXT_LENGTH),
    "outcome": Text(max_length=MAX_TEXT_LENGTH),
    "data_window": Custom(_data_window, _DATA_WINDOW.schema()),
    "split": Custom(_split, _SPLIT.schema()),
    "bin_edges": Custom(
        _edges,
        {
            "oneOf": [
                {
                    "type": "array",
                    "prefixItems": [{"const": 0}],
                    "items": Number(0, 1).schema(),
                    "minItems": 2,
                    "maxItems": MAX_BIN_EDGES,
                },
                _EQUAL_MASS.schema(),
            ]
        },
        nullable=True,
    ),
    "policy": Custom(_policy, DRIFT_POLICY.schema(), nullable=True),
}
SPEC_REQUIRED = ("model", "checkpoint", "task", "population", "outcome", "data_window", "split")

REGISTRATION = Body(
    "ContractRegistration",
    Obj(
        {
            **SPEC,
            "calibrator": Custom(_calibrator, CALIBRATOR_SCHEMA),
            "baseline": Custom(_baseline, BASELINE_SCHEMA),
        },
        required=(*SPEC_REQUIRED, "calibrator", "baseline"),
    ),
)
METHODS = (*sorted({m for methods in FIT_METHODS.values() for m in methods}), "auto")
FIT = Body(
    "ContractFit",
    Obj(
        {
            **SPEC,
            "method": Text(choices=METHODS),
            "fit": Custom(_labeled_set, LABELED_SET_SCHEMA),
            "eval": Custom(_labeled_set, LABELED_SET_SCHEMA),
        },
        required=(*SPEC_REQUIRED, "method", "fit", "eval"),
    ),
    all_of=(
        {
            "if": {"properties": {"task": {"const": "binary"}}, "required": ["task"]},
            "then": {
                "properties": {"fit": {"required": ["scores"]}, "eval": {"required": ["scores"]}}
            },
            "else": {
                "properties": {"fit": {"required": ["logits"]}, "eval": {"required": ["logits"]}}
            },
        },
    ),
)
RETIREMENT = Body("Retirement", Obj({"reason": Text(max_length=MAX_TEXT_LENGTH)}, ("reason",)))


def _spec_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's fields of parsed values, None for those missing."""
    return {name: values.get(name) for name in SPEC}


def parse_spec_fields(
    body: Mapping[str, Any], errors: ErrorCollector, now: datetime | None = None
) -> dict[str, Any]:
    """Validate the client-supplied fields shared by register and fit, as in a registration
    (``now``, default the current time, is the time of receipt); record every problem."""
    spec_only = Body("ContractSpec", Obj(SPEC, SPEC_REQUIRED))
    return _spec_fields(spec_only.parse(body, errors, now or datetime.now(UTC)))


def check_disjoint(split: Split) -> None:
    """Raise ``LeakageError`` when the fit and eval fingerprints are the same rows."""
    if split.fit_fingerprint is not None and split.fit_fingerprint == split.eval_fingerprint:
        raise LeakageError(
            "the fit and eval sets have the same fingerprint: the held-out evidence would be "
            "measured on the rows the calibrator was fitted on",
            [],
        )


def parse_registration(body: Any, now: datetime | None = None) -> ContractSpec:
    """Validate a ``POST /v1/contracts`` body into a spec, or raise listing every problem.

    ``now`` is the time of receipt (default: the current time)."""
    errors = ErrorCollector()
    values = REGISTRATION.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("the contract has invalid fields")
    spec = spec_of(
        _spec_fields(values),
        calibrator=values["calibrator"],
        baseline=Baseline(values["baseline"]),
    )
    check_disjoint(spec.split)
    return spec


def spec_of(fields: Mapping[str, Any], **rest: Any) -> ContractSpec:
    """The spec of validated fields (``parse_spec_fields``) and the rest of a contract
    (``calibrator``, ``baseline``, and overrides such as a ``split`` with fingerprints)."""
    values = {**fields, **rest}
    values["policy"] = DriftPolicy.from_dict(values["policy"])
    return ContractSpec(**values)


@dataclass(frozen=True)
class FitRequest:
    """A validated ``POST /v1/contracts/fit`` body."""

    fields: dict[str, Any]
    method: str
    fit: LabeledSet
    eval: LabeledSet


def parse_fit_request(body: Any, now: datetime | None = None) -> FitRequest:
    """Validate the body, listing every problem in one ``ValidationFailed``."""
    errors = ErrorCollector()
    values = FIT.parse(body, errors, now or datetime.now(UTC))
    method = values.get("method")
    problem = None if method is None else method_problem(method, values.get("task"))
    if problem is not None:
        errors.add("method", problem)
    errors.raise_if_any("the fit request has invalid fields")
    return FitRequest(_spec_fields(values), values["method"], values["fit"], values["eval"])


def parse_retirement(body: Any, now: datetime | None = None) -> str:
    """The reason of a ``POST /v1/contracts/{id}/retire`` body."""
    errors = ErrorCollector()
    values = RETIREMENT.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("invalid retirement")
    return str(values["reason"])
