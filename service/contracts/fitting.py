"""Fitting a contract from labeled fit and eval sets: the calibrator sees the fit set only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from service.calibration import (
    CalibrationInputError,
    Calibrator,
    DriftPolicy,
    IdentityCalibrator,
    PlattCalibrator,
    Reading,
    TemperatureCalibrator,
    binary_probabilities,
    binary_reading,
    default_edges,
    fit_binary_temperature,
    fit_platt,
    fit_temperature,
    multiclass_probabilities,
    multiclass_reading,
)
from service.calibration.auto import Selection, choose
from service.calibration.binary_families import (
    BetaCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
)
from service.calibration.calibrators import check_bounds
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    VectorCalibrator,
)
from service.calibration.nll_comparison import nll_difference
from service.calibration.vocabulary import Task
from service.common.errors import ErrorDetail, ValidationFailed
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import FIT_METHODS, Baseline, BaselineSplit, ContractSpec
from service.contracts.requests import FitRequest, check_disjoint, spec_of
from service.contracts.spec_bodies import EqualMass

_FAMILIES: dict[tuple[str, str], Any] = {
    (Task.BINARY, "isotonic"): IsotonicCalibrator.fit,
    (Task.BINARY, "histogram"): HistogramCalibrator.fit,
    (Task.BINARY, "beta"): BetaCalibrator.fit,
    (Task.MULTICLASS, "isotonic"): IsotonicOvRCalibrator.fit,
    (Task.MULTICLASS, "vector"): VectorCalibrator.fit,
    (Task.MULTICLASS, "matrix"): MatrixCalibrator.fit,
}


def fit_method(task: str, method: str, inputs: Any, labels: Any) -> Calibrator:
    """The calibrator of ``method`` fitted on (N, K) logits or (N,) scores and their labels,
    within the bounds a registered one must respect (``calibrators.check_bounds``: a Platt
    fit on scores that barely vary can exceed them). Raises ``CalibrationInputError``."""
    calibrator: Calibrator
    family = _FAMILIES.get((task, method))
    if family is not None:
        calibrator = family(inputs, labels)
    elif method == "identity":
        calibrator = IdentityCalibrator()
    elif task == Task.MULTICLASS:
        calibrator = TemperatureCalibrator(fit_temperature(inputs, labels).temperature)
    elif method == "platt":
        result = fit_platt(inputs, labels)
        calibrator = PlattCalibrator(result.slope, result.intercept)
    else:
        calibrator = TemperatureCalibrator(fit_binary_temperature(inputs, labels).temperature)
    check_bounds(calibrator)
    return calibrator


def _select(task: str, fit: LabeledSet, edges: tuple[float, ...] | EqualMass) -> Selection:
    """Cross-validate every method of the task inside the fit set (``calibration.auto``); the
    ECE bins are the contract's, or 15 equal ones when its edges come from the fit."""
    bins = default_edges() if isinstance(edges, EqualMass) else np.asarray(edges, dtype=np.float64)
    try:
        return choose(task, fit.inputs, fit.labels, FIT_METHODS[task], _fit_for(task), bins)
    except CalibrationInputError as exc:
        raise ValidationFailed(
            f"the calibrator could not be chosen: {exc}", [ErrorDetail("fit", str(exc))]
        ) from exc


def _fit_for(task: str) -> Any:
    return lambda method, inputs, labels: fit_method(task, method, inputs, labels)


def _fit_calibrator(task: str, method: str, fit: LabeledSet) -> Calibrator:
    """The calibrator fitted on ``fit`` (``fit_method``); a fit that fails is a 422."""
    try:
        return fit_method(task, method, fit.inputs, fit.labels)
    except CalibrationInputError as exc:
        raise ValidationFailed(
            f"the calibrator could not be fitted: {exc}", [ErrorDetail("fit", str(exc))]
        ) from exc


def equal_mass_edges(task: str, data: LabeledSet, calibrator: Calibrator, bins: int) -> np.ndarray:
    """The (M' + 1,) edges ``0, q_1, ..., q_{M-1}, 1`` with ``q_j`` the ``j / M`` quantile of the
    calibrated confidences of ``data`` (multiclass: top-label confidence; binary: P(positive)),
    taken as the inverted empirical CDF (the smallest confidence with at least ``j N / M`` rows
    at or below it), so tied confidences give equal quantiles; those, and any on 0 or 1, are
    merged, so M' <= M."""
    if task == Task.MULTICLASS:
        confidence = multiclass_probabilities(calibrator, data.inputs).max(axis=1)
    else:
        confidence = binary_probabilities(calibrator, data.inputs)
    inner = np.quantile(confidence, np.arange(1, bins) / bins, method="inverted_cdf")
    inner = np.unique(inner[(inner > 0.0) & (inner < 1.0)])
    return np.r_[0.0, inner, 1.0]


def reading_of(
    task: str,
    data: LabeledSet,
    edges: np.ndarray,
    calibrator: Calibrator,
    costs: tuple[float, float] | None,
) -> Reading:
    """The reading of a labeled set under ``calibrator`` with the contract's (M + 1,) edges and,
    for a binary task, its costs ``(c_fp, c_fn)`` (None: threshold 0.5, no expected cost)."""
    if task == Task.MULTICLASS:
        return multiclass_reading(data.inputs, data.labels, edges, calibrator=calibrator)
    c_fp, c_fn = costs if costs is not None else (None, None)
    return binary_reading(
        data.inputs, data.labels, edges, calibrator=calibrator, c_fp=c_fp, c_fn=c_fn
    )


def baseline_split(
    task: str,
    data: LabeledSet,
    edges: np.ndarray,
    calibrator: Calibrator,
    costs: tuple[float, float] | None,
) -> BaselineSplit:
    """The readings of ``data`` raw and under ``calibrator``, and the summary of the per-row
    NLL differences the gate's paired test needs once the rows are gone."""
    return BaselineSplit(
        uncalibrated=reading_of(task, data, edges, IdentityCalibrator(), costs),
        calibrated=reading_of(task, data, edges, calibrator, costs),
        nll_difference=nll_difference(task, data.inputs, data.labels, calibrator),
    )


def fit_contract_spec(request: FitRequest) -> ContractSpec:
    """Fingerprint both sets, refuse leakage, fit on ``fit`` only, measure both: a spec to store."""
    fields = request.fields
    split = replace(
        fields["split"],
        fit_fingerprint=request.fit.fingerprint(),
        eval_fingerprint=request.eval.fingerprint(),
    )
    check_disjoint(split)
    task = fields["task"]
    selection = None
    method = request.method
    if method == "auto":
        selection = _select(task, request.fit, fields["bin_edges"])
        method = selection.chosen
    calibrator = _fit_calibrator(task, method, request.fit)
    if isinstance(fields["bin_edges"], EqualMass):
        edges = equal_mass_edges(task, request.fit, calibrator, fields["bin_edges"].bins)
        fields = {**fields, "bin_edges": tuple(edges.tolist())}
    edges = np.asarray(fields["bin_edges"], dtype=np.float64)
    policy = DriftPolicy.from_dict(fields["policy"])
    costs = policy.costs if task == Task.BINARY else None
    baseline = Baseline.of(
        baseline_split(task, request.fit, edges, calibrator, costs),
        baseline_split(task, request.eval, edges, calibrator, costs),
    )
    if selection is not None:
        baseline = Baseline({**baseline.document, "selection": selection.to_dict()})
    return spec_of(fields, split=split, calibrator=calibrator, baseline=baseline)
