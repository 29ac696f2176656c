"""Fitting a contract from labeled fit and eval sets: the calibrator sees the fit set only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration import (
    CalibrationInputError,
    Calibrator,
    IdentityCalibrator,
    PlattCalibrator,
    Reading,
    TemperatureCalibrator,
    binary_reading,
    fit_binary_temperature,
    fit_platt,
    fit_temperature,
    multiclass_reading,
)
from service.calibration.calibrators import check_bounds
from service.calibration.nll_comparison import nll_difference
from service.common.errors import ErrorCollector, ErrorDetail, ValidationFailed
from service.common.values import expect_object, expect_str
from service.contracts.labeled_sets import LabeledSet, parse_labeled_set
from service.contracts.model import SPEC_FIELDS, ContractSpec, check_disjoint, parse_spec_fields

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
    if method == "platt" and task == "multiclass":
        errors.add("method", "platt scaling is for binary contracts only; use temperature")
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


def _fit_calibrator(task: str, method: str, fit: LabeledSet) -> Calibrator:
    """The calibrator fitted on ``fit``, within the bounds a registered one must respect
    (``calibrators.check_bounds``): a Platt fit on scores that barely vary can exceed them."""
    calibrator: Calibrator
    try:
        if task == "multiclass":
            calibrator = TemperatureCalibrator(fit_temperature(fit.inputs, fit.labels).temperature)
        elif method == "platt":
            result = fit_platt(fit.inputs, fit.labels)
            calibrator = PlattCalibrator(result.slope, result.intercept)
        else:
            calibrator = TemperatureCalibrator(
                fit_binary_temperature(fit.inputs, fit.labels).temperature
            )
        check_bounds(calibrator)
    except CalibrationInputError as exc:
        raise ValidationFailed(
            f"the calibrator could not be fitted: {exc}", [ErrorDetail("fit", str(exc))]
        ) from exc
    return calibrator


def reading_of(
    task: str,
    data: LabeledSet,
    edges: np.ndarray,
    calibrator: Calibrator,
    policy: Mapping[str, Any],
) -> Reading:
    """The reading of a labeled set under ``calibrator`` with the contract's edges and costs."""
    if task == "multiclass":
        return multiclass_reading(data.inputs, data.labels, edges, calibrator=calibrator)
    return binary_reading(
        data.inputs,
        data.labels,
        edges,
        calibrator=calibrator,
        c_fp=policy.get("c_fp"),
        c_fn=policy.get("c_fn"),
    )


def baseline_of(
    task: str,
    fit: LabeledSet,
    held_out: LabeledSet,
    edges: np.ndarray,
    calibrator: Calibrator,
    policy: Mapping[str, Any],
) -> dict[str, Any]:
    """``{"fit"|"eval": {"uncalibrated": R, "calibrated": R, "nll_difference": D}}``.

    ``nll_difference`` summarises the per-row NLL differences (calibrated minus uncalibrated)
    that the gate's paired NLL test needs once the rows are gone.
    """
    return {
        split: {
            "uncalibrated": reading_of(task, data, edges, IdentityCalibrator(), policy).to_dict(),
            "calibrated": reading_of(task, data, edges, calibrator, policy).to_dict(),
            "nll_difference": nll_difference(task, data.inputs, data.labels, calibrator).to_dict(),
        }
        for split, data in (("fit", fit), ("eval", held_out))
    }


def fit_contract_spec(request: FitRequest) -> ContractSpec:
    """Fingerprint both sets, refuse leakage, fit on ``fit`` only, measure both: a spec to store."""
    fields = dict(request.fields)
    split = {
        **fields["split"],
        "fit_fingerprint": request.fit.fingerprint(),
        "eval_fingerprint": request.eval.fingerprint(),
    }
    check_disjoint(split)
    calibrator = _fit_calibrator(fields["task"], request.method, request.fit)
    edges = np.asarray(fields["bin_edges"], dtype=np.float64)
    baseline = baseline_of(
        fields["task"], request.fit, request.eval, edges, calibrator, fields["policy"]
    )
    return ContractSpec(
        **{**fields, "split": split, "calibrator": calibrator.to_dict(), "baseline": baseline}
    )
