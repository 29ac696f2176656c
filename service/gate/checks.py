"""The deployment review gate: checks a contract (or a fresh held-out set) against a policy.

The checks are a table of small functions over one ``_Evidence``. The evidence says where the
contract's baseline came from (``baseline_source``): ``measured`` when calmon fitted the contract
and measured its held-out set itself (``POST /v1/contracts/fit``, ``calmon fit``), ``supplied``
when the registrant sent the baseline; ``require_measured_baseline`` fails a supplied baseline
unless a fresh ``evaluation`` is sent, which calmon then measures and judges instead.

The ECE check judges ``max_ece`` by the policy's ``ece_rule`` (``service.gate.ece_rule``): by
default it fails when the debiased ECE exceeds ``max_ece``; ``shown_above`` fails only when the
evidence shows the ECE above it, ``shown_below`` unless the evidence shows it at or below (the
older ``max_ece_ci_upper`` adds such a check at its own limit). A two-class multiclass model is
judged in its positive-class view too. ``calibrator_bound`` fails a temperature that stopped on
the range the fit searches (``calibrators.bound_warning``). The NLL check is the paired test of
``nll_comparison.judge_nll``: fail when the evidence shows the calibrated held-out log loss above
the uncalibrated one by more than 1% of it; for a step-shaped calibrator (isotonic, histogram)
the message names the family that would not lose (the identity on a model already within
``max_ece``, else temperature scaling).
The reply never gives the ECE alone: the evidence carries the reliability table with counts and
Wilson intervals beside the ECE, its debiased value and interval, and the NLL before and after.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from service.calibration import (
    CalibrationInputError,
    EceInference,
    Reading,
    bins_inference,
)
from service.calibration.binary_families import HistogramCalibrator, IsotonicCalibrator
from service.calibration.calibrators import bound_warning
from service.calibration.multiclass_families import IsotonicOvRCalibrator
from service.calibration.nll_comparison import NLL_MARGIN, NllComparison, judge_nll
from service.calibration.vocabulary import Task
from service.common.errors import ErrorCollector, ErrorDetail, ValidationFailed
from service.common.hashing import sha256_of
from service.contracts.fitting import baseline_split
from service.contracts.labeled_sets import LabeledSet, parse_labeled_set
from service.contracts.model import BaselineSource, Contract
from service.gate.ece_rule import EceRule, fmt, judge_ece
from service.gate.live import LiveSlice, judge_live
from service.gate.requests import GateRequest

_REQUIRED_FIELDS = (
    "checkpoint",
    "population",
    "outcome",
    "data_window",
    "split.method",
    "split.fit_fingerprint",
    "split.eval_fingerprint",
    "bin_edges",
    "baseline",
)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    observed: Any
    threshold: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "observed": self.observed,
            "threshold": self.threshold,
            "message": self.message,
        }


@dataclass(frozen=True)
class GateOutcome:
    """A decision with its checks, evidence and policy; ``ece_views`` are the reliability views
    (name, inference) the ECE check judged, so another ``ece_rule`` can judge them too."""

    decision: str
    checks: tuple[Check, ...]
    evidence: dict[str, Any]
    policy: dict[str, Any]
    ece_views: tuple[tuple[str, EceInference], ...] = field(default=(), compare=False)

    @property
    def evidence_sha256(self) -> str:
        return sha256_of(self.evidence)

    @property
    def policy_sha256(self) -> str:
        return sha256_of(self.policy)


def _field(spec_dict: Mapping[str, Any], dotted: str) -> Any:
    value: Any = spec_dict
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


@dataclass(frozen=True)
class _Evidence:
    """What the checks judge: the contract, the policy and the held-out readings."""

    contract: Contract
    policy: dict[str, Any]
    source: dict[str, Any]
    baseline_source: BaselineSource
    calibrated: Reading
    uncalibrated: Reading
    inference: EceInference
    nll: NllComparison | None
    eval_fingerprint: str | None
    live: tuple[LiveSlice, ...] = ()

    @property
    def views(self) -> list[tuple[str, EceInference]]:
        """The reliability views the ECE check judges, with their inference."""
        name = "positive" if self.calibrated.task == Task.BINARY else "top-label"
        out = [(name, self.inference)]
        if self.calibrated.positive_class is not None:
            out.append(("positive-class", bins_inference(self.calibrated.positive_class.bins)))
        return out


def _required_fields(e: _Evidence) -> Check:
    document = e.contract.hashed_document()
    missing = [f for f in _REQUIRED_FIELDS if _field(document, f) in (None, "", [], {})]
    return Check(
        "required_fields",
        not missing,
        missing or "all present",
        list(_REQUIRED_FIELDS),
        "the contract names its checkpoint, population, outcome, window, split "
        "and held-out evidence"
        if not missing
        else f"the contract lacks {', '.join(missing)}",
    )


def _disjoint_eval(e: _Evidence) -> Check:
    fit_fp = e.contract.spec.split.fit_fingerprint
    eval_fp = e.eval_fingerprint or e.contract.spec.split.eval_fingerprint
    disjoint = fit_fp is not None and eval_fp is not None and fit_fp != eval_fp
    return Check(
        "disjoint_eval",
        disjoint or not e.policy["require_disjoint_eval"],
        {"fit_fingerprint": fit_fp, "eval_fingerprint": eval_fp},
        "different fingerprints",
        "the evaluation rows differ from the rows the calibrator was fitted on"
        if disjoint
        else "the evaluation set is the fit set, or a fingerprint is missing: the evidence "
        "would be optimistic",
    )


def _eval_samples(e: _Evidence) -> Check:
    n, needed = e.calibrated.n, e.policy["min_eval_samples"]
    return Check(
        "eval_samples",
        n >= needed,
        n,
        needed,
        f"{n} held-out predictions (at least {needed} needed)",
    )


def _eval_ece(e: _Evidence) -> Check:
    limit = e.policy["max_ece"]
    verdict = judge_ece(EceRule(e.policy["ece_rule"]), e.views, limit)
    return Check("eval_ece", verdict.passed, verdict.observed, limit, verdict.message)


def _calibrator_bound(e: _Evidence) -> Check:
    warning = bound_warning(e.contract.calibrator)
    return Check(
        "calibrator_bound",
        warning is None,
        e.contract.calibrator.to_dict(),
        "inside the range the fit searches",
        warning or "the calibrator's parameters lie inside the range the fit searches",
    )


def _eval_ece_ci_upper(e: _Evidence) -> Check | None:
    """``max_ece_ci_upper``, the older spelling of ``shown_below``: its own check and limit."""
    limit = e.policy.get("max_ece_ci_upper")
    if limit is None:
        return None
    verdict = judge_ece(EceRule.SHOWN_BELOW, e.views[:1], limit, "max_ece_ci_upper")
    return Check(
        "eval_ece_ci_upper", verdict.passed, _number(e.inference.upper), limit, verdict.message
    )


def _nll_improvement(e: _Evidence) -> Check:
    observed = {
        "uncalibrated": _number(e.uncalibrated.nll),
        "calibrated": _number(e.calibrated.nll),
    }
    if e.nll is None:
        return Check(
            "nll_improvement",
            True,
            observed,
            "not significantly worse",
            "not tested: the baseline carries no per-row NLL differences (send an evaluation "
            "set to test it)",
        )
    c = e.nll
    observed |= {"mean_difference": c.mean_difference, "lower_bound": c.lower_bound}
    head = (
        f"held-out log loss {_fmt(observed['uncalibrated'])} -> {_fmt(observed['calibrated'])} "
        f"(per-row difference {c.mean_difference:+.5f} nats, 97.5% lower bound "
        f"{c.lower_bound:+.5f}, margin {c.tolerance:.5f} = {NLL_MARGIN:.0%} of the uncalibrated "
        "log loss)"
    )
    if c.worse:
        message = f"{head}: the calibrator makes held-out probabilities worse{_instead(e)}"
    else:
        message = f"{head}: the calibrator is not shown worse by more than the margin"
    return Check(
        "nll_improvement",
        not c.worse or not e.policy["require_nll_improvement"],
        observed,
        c.tolerance,
        message,
    )


#: Calibrator families whose map is a step function of the score.
_STEP_SHAPED = (IsotonicCalibrator, HistogramCalibrator, IsotonicOvRCalibrator)


def _instead(e: _Evidence) -> str:
    """For a step-shaped calibrator that loses log loss: the family that would not."""
    calibrator = e.contract.calibrator
    if not isinstance(calibrator, _STEP_SHAPED):
        return ""
    method = calibrator.to_dict()["method"]
    before = bins_inference(e.uncalibrated.bins)
    limit = e.policy["max_ece"]
    if not math.isnan(before.debiased) and before.debiased <= limit:
        return (
            f"; the {method} map is a step function fitted to a model that is already "
            f"calibrated (its uncalibrated debiased ECE {fmt(before.debiased)} is within max_ece "
            f"{fmt(limit)}): the identity would not be worse"
        )
    fit_rows = e.contract.baseline_reading("fit", "calibrated").n
    return (
        f"; the {method} map is a step function: temperature scaling would not be worse (one "
        f"smooth parameter, costing about 1 / (2 x {fit_rows} fit rows) = "
        f"{1.0 / (2.0 * max(fit_rows, 1)):.5f} nats where the model is calibrated)"
    )


def _measured_baseline(e: _Evidence) -> Check | None:
    if not e.policy.get("require_measured_baseline"):
        return None
    fresh = e.source["kind"] == "evaluation"
    if fresh:
        message = "judged on a fresh evaluation set that calmon measured"
    elif e.baseline_source == "measured":
        message = "the held-out baseline was measured by calmon when it fitted the contract"
    else:
        message = (
            "the held-out baseline was supplied by the registrant: send a fresh evaluation "
            "set, or register the contract through /v1/contracts/fit (calmon fit)"
        )
    return Check(
        "measured_baseline",
        fresh or e.baseline_source == "measured",
        "evaluation" if fresh else e.baseline_source,
        "measured",
        message,
    )


def _bin_samples(e: _Evidence) -> Check:
    smallest = min((b.n for b in e.calibrated.bins), default=0)
    needed = e.policy["min_bin_samples"]
    return Check(
        "bin_samples",
        smallest >= needed,
        smallest,
        needed,
        f"the smallest non-empty reliability bin holds {smallest} predictions",
    )


def _live_status(e: _Evidence) -> Check | None:
    """``max_live_status``: no exported slice of the model at that status or worse now."""
    limit = e.policy.get("max_live_status")
    if limit is None:
        return None
    verdict = judge_live(e.live, limit)
    return Check("live_status", verdict.passed, verdict.observed, limit, verdict.message)


#: Every check of the gate, in the order they are reported; None means "not asked for".
CHECKS: tuple[Callable[[_Evidence], Check | None], ...] = (
    _required_fields,
    _measured_baseline,
    _disjoint_eval,
    _eval_samples,
    _calibrator_bound,
    _eval_ece,
    _eval_ece_ci_upper,
    _nll_improvement,
    _bin_samples,
    _live_status,
)


def evaluate_gate(
    contract: Contract,
    request: GateRequest,
    baseline_source: BaselineSource = "supplied",
    live: tuple[LiveSlice, ...] = (),
) -> GateOutcome:
    """Run every check; the decision passes only if all of them do.

    ``baseline_source`` is where the contract's stored baseline came from (the caller knows,
    from the audit chain); unknown provenance is ``supplied``. ``live`` are the model's exported
    slices now (``live.live_slices``), judged when the policy sets ``max_live_status``.
    """
    policy = dict(request.policy)
    if policy.get("max_ece") is None:
        policy["max_ece"] = contract.policy.max_ece
    e = replace(_gather(contract, request, policy, baseline_source), live=live)
    checks = tuple(c for check in CHECKS if (c := check(e)) is not None)
    calibrated = e.calibrated.to_dict()
    evidence = {
        "source": e.source,
        "baseline_source": baseline_source,
        "contract": {
            "id": contract.id,
            "model": contract.model,
            "version": contract.version,
            "content_sha256": contract.content_sha256,
        },
        "n": e.calibrated.n,
        "ece": calibrated["ece"],
        "ece_debiased": _number(e.inference.debiased),
        "ece_ci": [_number(e.inference.lower), _number(e.inference.upper)],
        "calibration_p_value": _number(e.inference.p_value),
        "positive_class": None
        if e.calibrated.positive_class is None
        else e.calibrated.positive_class.to_dict(),
        "nll": {"uncalibrated": _number(e.uncalibrated.nll), "calibrated": calibrated["nll"]},
        "nll_difference": None
        if e.nll is None
        else {
            "mean": e.nll.mean_difference,
            "lower_bound": e.nll.lower_bound,
            "tolerance": e.nll.tolerance,
        },
        "brier": {"uncalibrated": _number(e.uncalibrated.brier), "calibrated": calibrated["brier"]},
        "reliability": calibrated["bins"],
        "bin_edges": list(contract.spec.bin_edges),
    }
    if policy.get("max_live_status") is not None:
        evidence["live"] = {"slices": [s.to_dict() for s in live]}
    decision = "pass" if all(c.passed for c in checks) else "fail"
    return GateOutcome(decision, checks, evidence, policy, tuple(e.views))


def _gather(
    contract: Contract,
    request: GateRequest,
    policy: dict[str, Any],
    baseline_source: BaselineSource,
) -> _Evidence:
    """The readings the checks judge: the stored eval baseline, or a fresh evaluation set."""
    spec = contract.spec
    if request.evaluation is None:
        calibrated = contract.baseline_reading("eval", "calibrated")
        uncalibrated = contract.baseline_reading("eval", "uncalibrated")
        stored_difference = contract.baseline_nll_difference("eval")
        return _Evidence(
            contract=contract,
            policy=policy,
            baseline_source=baseline_source,
            source={
                "kind": "contract_eval_baseline",
                "fingerprint": spec.split.eval_fingerprint,
            },
            calibrated=calibrated,
            uncalibrated=uncalibrated,
            inference=bins_inference(calibrated.bins),
            nll=None
            if stored_difference is None
            else judge_nll(stored_difference, uncalibrated.nll),
            eval_fingerprint=None,
        )
    errors = ErrorCollector()
    data: LabeledSet | None = parse_labeled_set(
        request.evaluation, "evaluation", task=spec.task, classes=spec.classes, errors=errors
    )
    errors.raise_if_any("the evaluation set is invalid")
    assert data is not None
    try:
        measured = baseline_split(spec.task, data, contract.edges, contract.calibrator, spec.costs)
    except CalibrationInputError as exc:
        raise ValidationFailed(
            "the evaluation set cannot be measured", [ErrorDetail("evaluation", str(exc))]
        ) from exc
    fingerprint = data.fingerprint()
    return _Evidence(
        contract=contract,
        policy=policy,
        baseline_source=baseline_source,
        source={"kind": "evaluation", "fingerprint": fingerprint},
        calibrated=measured.calibrated,
        uncalibrated=measured.uncalibrated,
        inference=bins_inference(measured.calibrated.bins),
        nll=None
        if measured.nll_difference is None
        else judge_nll(measured.nll_difference, measured.uncalibrated.nll),
        eval_fingerprint=fingerprint,
    )


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else value


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.4f}"
