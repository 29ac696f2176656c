"""Calibration contracts: parsing and validating their fields, canonical form and content hash.

A contract is immutable once stored. Its ``content_sha256`` is the SHA-256 of the canonical JSON
(sorted keys, no whitespace, UTF-8, shortest round-trip floats) of every field except the hash
itself and the retirement, which is a later event.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
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
from service.calibration.nll_comparison import NllDifference
from service.errors import ErrorCollector, LeakageError
from service.validation import (
    NAME_PATTERN,
    expect_int,
    expect_number,
    expect_object,
    expect_str,
    expect_timestamp,
    format_timestamp,
)

TASKS = ("multiclass", "binary")
OBJECTIVES = ("nll",)
DEFAULT_BINARY_CLASSES = ("negative", "positive")
DEFAULT_POLICY = {"max_ece": 0.05, "max_ece_increase": 0.02, "min_labeled": 200}
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


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8, no NaN: the bytes the hash is over."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def content_sha256(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(document)).hexdigest()


def _calibration_field(errors: ErrorCollector, field: str, exc: CalibrationInputError) -> None:
    name = getattr(exc, "field", "") or ""
    errors.add(name if name.startswith(field) else f"{field}.{name}".rstrip("."), str(exc))


def _parse_classes(value: Any, task: str | None, errors: ErrorCollector) -> tuple[str, ...]:
    if value is None:
        if task == "multiclass":
            errors.add("classes", "required for a multiclass contract (K >= 2 class names)")
        return DEFAULT_BINARY_CLASSES
    if not isinstance(value, list):
        errors.add("classes", "expected a list of class names")
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


def _parse_data_window(value: Any, errors: ErrorCollector) -> dict[str, str]:
    window = expect_object(value, "data_window", errors, required=("start", "end"))
    if window is None:
        return {}
    start = expect_timestamp(window.get("start"), "data_window.start", errors)
    end = expect_timestamp(window.get("end"), "data_window.end", errors)
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
    out: dict[str, Any] = {"method": expect_str(split.get("method"), "split.method", errors)}
    for key in ("fit_fingerprint", "eval_fingerprint"):
        out[key] = _parse_fingerprint(split.get(key), f"split.{key}", errors)
    return out


def _parse_edges(value: Any, errors: ErrorCollector) -> tuple[float, ...]:
    if value is None:
        return tuple(float(e) for e in default_edges())
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in value
    ):
        errors.add("bin_edges", "expected a list of numbers")
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
                policy[key], f"{path}.{key}", errors, minimum=0, exclusive_minimum=True
            )
    return out


def parse_spec_fields(body: Mapping[str, Any], errors: ErrorCollector) -> dict[str, Any]:
    """Validate the client-supplied fields shared by register and fit; record every problem."""
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
        "population": expect_str(body.get("population"), "population", errors, max_length=2000)
        if "population" in body
        else None,
        "outcome": expect_str(body.get("outcome"), "outcome", errors, max_length=2000)
        if "outcome" in body
        else None,
        "data_window": _parse_data_window(body.get("data_window"), errors)
        if "data_window" in body
        else {},
        "split": _parse_split(body.get("split"), errors) if "split" in body else {},
        "bin_edges": _parse_edges(body.get("bin_edges"), errors),
        "policy": parse_policy(body.get("policy"), errors),
    }
    return fields


def parse_calibrator(value: Any, task: str | None, errors: ErrorCollector) -> dict[str, Any]:
    """Validate a calibrator object for ``task``; return its canonical dict."""
    try:
        calibrator = calibrator_from_dict(value)
    except CalibrationInputError as exc:
        _calibration_field(errors, "calibrator", exc)
        return {}
    as_dict = calibrator.to_dict()
    if as_dict["method"] == "platt" and task == "multiclass":
        errors.add("calibrator.method", "platt scaling is for binary contracts only")
    return as_dict


_READING_NUMBERS = ("ece", "nll", "brier", "accuracy")


def _parse_reading(value: Any, path: str, edges: tuple[float, ...], errors: ErrorCollector) -> None:
    reading = expect_object(
        value,
        path,
        errors,
        required=("n", *_READING_NUMBERS, "bins"),
        optional=(
            "ece_ci",
            "ece_debiased",
            "calibration_p_value",
            "mce",
            "mce_n",
            "mean_confidence",
            "classwise_ece",
            "auc",
            "prevalence",
            "mean_score",
            "threshold",
            "expected_cost",
            "label_counts",
        ),
    )
    if reading is None:
        return
    n = expect_int(reading.get("n"), f"{path}.n", errors, minimum=0)
    for key in _READING_NUMBERS:
        if key in reading:
            expect_number(reading[key], f"{path}.{key}", errors, minimum=0)
    bins = reading.get("bins")
    if not isinstance(bins, list):
        errors.add(f"{path}.bins", "expected a list of bins")
        return
    pairs = set(itertools.pairwise(edges))
    total = 0
    for i, b in enumerate(bins):
        bpath = f"{path}.bins[{i}]"
        obj = expect_object(
            b,
            bpath,
            errors,
            required=("lo", "hi", "n", "mean_confidence", "accuracy"),
            optional=("ci",),
        )
        if obj is None:
            continue
        count = expect_int(obj.get("n"), f"{bpath}.n", errors, minimum=1)
        total += count or 0
        lo, hi = obj.get("lo"), obj.get("hi")
        if edges and (lo, hi) not in pairs:
            errors.add(bpath, "lo/hi must be two consecutive bin_edges")
        for key in ("mean_confidence", "accuracy"):
            expect_number(obj.get(key), f"{bpath}.{key}", errors, minimum=0, maximum=1)
    if n is not None and total != n:
        errors.add(f"{path}.bins", f"bin counts add up to {total}, not n = {n}")


def parse_baseline(value: Any, edges: tuple[float, ...], errors: ErrorCollector) -> dict[str, Any]:
    """Validate ``{"fit": {"uncalibrated": R, "calibrated": R}, "eval": {...}}``."""
    baseline = expect_object(value, "baseline", errors, required=("fit", "eval"))
    if baseline is None:
        return {}
    for split in ("fit", "eval"):
        part = expect_object(
            baseline.get(split),
            f"baseline.{split}",
            errors,
            required=("uncalibrated", "calibrated"),
            optional=("nll_difference",),
        )
        if part is None:
            continue
        for which in ("uncalibrated", "calibrated"):
            if which in part:
                _parse_reading(part[which], f"baseline.{split}.{which}", edges, errors)
        if "nll_difference" in part:
            try:
                NllDifference.from_dict(part["nll_difference"], f"baseline.{split}.nll_difference")
            except CalibrationInputError as exc:
                errors.add(exc.field, exc.message)
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


def parse_registration(body: Mapping[str, Any]) -> ContractSpec:
    """Validate a ``POST /v1/contracts`` body into a spec, or raise listing every problem."""
    errors = ErrorCollector()
    expect_object(body, "", errors, required=("calibrator", "baseline"), optional=SPEC_FIELDS)
    fields = parse_spec_fields(body, errors)
    fields["calibrator"] = (
        parse_calibrator(body.get("calibrator"), fields["task"], errors)
        if "calibrator" in body
        else {}
    )
    fields["baseline"] = (
        parse_baseline(body.get("baseline"), fields["bin_edges"], errors)
        if "baseline" in body
        else {}
    )
    errors.raise_if_any("the contract has invalid fields")
    spec = ContractSpec(**fields)
    check_disjoint(spec.split)
    return spec
