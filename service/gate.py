"""The deployment review gate: checks a contract (or a fresh held-out set) against a policy.

The reply never gives the ECE alone: the evidence carries the reliability table with counts and
Wilson intervals beside the ECE and its interval, and the NLL before and after calibration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.calibration import CalibrationInputError, IdentityCalibrator
from service.contract_fit import reading_of
from service.contracts import Contract, canonical_json
from service.errors import ErrorCollector, ValidationFailed
from service.labeled_sets import LabeledSet, parse_labeled_set
from service.validation import expect_int, expect_number, expect_object

#: Policy defaults: ``max_ece`` falls back to the contract's own policy threshold.
DEFAULT_GATE_POLICY: dict[str, Any] = {
    "max_ece_ci_upper": None,
    "min_eval_samples": 500,
    "min_bin_samples": 0,
    "require_nll_improvement": True,
    "require_disjoint_eval": True,
}
_POLICY_KEYS = ("max_ece", *DEFAULT_GATE_POLICY)
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
class GateRequest:
    contract_id: str
    policy: dict[str, Any]
    evaluation: Any


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
    decision: str
    checks: tuple[Check, ...]
    evidence: dict[str, Any]
    policy: dict[str, Any]

    @property
    def evidence_sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.evidence)).hexdigest()

    @property
    def policy_sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.policy)).hexdigest()


def parse_gate_request(body: Mapping[str, Any]) -> GateRequest:
    """Validate ``{"contract_id", "policy"?, "evaluation"?}`` (the evaluation is parsed later,
    against the contract's task and classes)."""
    errors = ErrorCollector()
    expect_object(body, "", errors, required=("contract_id",), optional=("policy", "evaluation"))
    contract_id = body.get("contract_id")
    if "contract_id" in body and (not isinstance(contract_id, str) or not contract_id):
        errors.add("contract_id", "expected a contract id")
    policy = _parse_policy(body.get("policy") or {}, errors)
    errors.raise_if_any("the gate request is invalid")
    return GateRequest(
        contract_id=str(contract_id), policy=policy, evaluation=body.get("evaluation")
    )


def _parse_policy(value: Any, errors: ErrorCollector) -> dict[str, Any]:
    policy = expect_object(value, "policy", errors, optional=_POLICY_KEYS)
    if policy is None:
        return {}
    out = dict(DEFAULT_GATE_POLICY)
    for key in ("max_ece", "max_ece_ci_upper"):
        if policy.get(key) is not None:
            out[key] = expect_number(policy[key], f"policy.{key}", errors, minimum=0, maximum=1)
    for key in ("min_eval_samples", "min_bin_samples"):
        if key in policy:
            out[key] = expect_int(policy[key], f"policy.{key}", errors, minimum=0)
    for key in ("require_nll_improvement", "require_disjoint_eval"):
        if key in policy:
            if not isinstance(policy[key], bool):
                errors.add(f"policy.{key}", "expected true or false")
            out[key] = policy[key]
    return out


def _field(spec_dict: Mapping[str, Any], dotted: str) -> Any:
    value: Any = spec_dict
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def evaluate_gate(contract: Contract, request: GateRequest) -> GateOutcome:
    """Run every check; the decision passes only if all of them do."""
    policy = dict(request.policy)
    if policy.get("max_ece") is None:
        policy["max_ece"] = float(contract.spec.policy["max_ece"])
    document = contract.hashed_document()
    checks: list[Check] = []

    missing = [f for f in _REQUIRED_FIELDS if _field(document, f) in (None, "", [], {})]
    checks.append(
        Check(
            "required_fields",
            not missing,
            missing or "all present",
            list(_REQUIRED_FIELDS),
            "the contract names its checkpoint, population, outcome, window, split "
            "and held-out evidence"
            if not missing
            else f"the contract lacks {', '.join(missing)}",
        )
    )

    split = contract.spec.split
    fit_fp, eval_fp = split.get("fit_fingerprint"), split.get("eval_fingerprint")
    source, calibrated, uncalibrated, evaluation_fp = _evidence_readings(contract, request)
    if evaluation_fp is not None:
        eval_fp = evaluation_fp
    disjoint = fit_fp is not None and eval_fp is not None and fit_fp != eval_fp
    checks.append(
        Check(
            "disjoint_eval",
            disjoint or not policy["require_disjoint_eval"],
            {"fit_fingerprint": fit_fp, "eval_fingerprint": eval_fp},
            "different fingerprints",
            "the evaluation rows differ from the rows the calibrator was fitted on"
            if disjoint
            else "the evaluation set is the fit set, or a fingerprint is missing: the evidence "
            "would be optimistic",
        )
    )

    n = int(calibrated["n"])
    checks.append(
        Check(
            "eval_samples",
            n >= policy["min_eval_samples"],
            n,
            policy["min_eval_samples"],
            f"{n} held-out predictions (at least {policy['min_eval_samples']} needed)",
        )
    )

    ece = calibrated["ece"]
    checks.append(
        Check(
            "eval_ece",
            ece is not None and ece <= policy["max_ece"],
            ece,
            policy["max_ece"],
            f"calibrated ECE {_fmt(ece)} against max_ece {policy['max_ece']:.4f}",
        )
    )

    upper = (calibrated.get("ece_ci") or [None, None])[1]
    if policy.get("max_ece_ci_upper") is not None:
        limit = policy["max_ece_ci_upper"]
        checks.append(
            Check(
                "eval_ece_ci_upper",
                upper is not None and upper <= limit,
                upper,
                limit,
                f"upper bound of the ECE's 95% interval {_fmt(upper)} against {limit:.4f}",
            )
        )

    before, after = uncalibrated["nll"], calibrated["nll"]
    improved = before is not None and after is not None and after <= before
    checks.append(
        Check(
            "nll_improvement",
            improved or not policy["require_nll_improvement"],
            {"uncalibrated": before, "calibrated": after},
            "calibrated <= uncalibrated",
            f"held-out NLL {_fmt(before)} -> {_fmt(after)} with the calibrator",
        )
    )

    smallest = min((b["n"] for b in calibrated["bins"]), default=0)
    checks.append(
        Check(
            "bin_samples",
            smallest >= policy["min_bin_samples"],
            smallest,
            policy["min_bin_samples"],
            f"the smallest non-empty reliability bin holds {smallest} predictions",
        )
    )

    evidence = {
        "source": source,
        "contract": {
            "id": contract.id,
            "model": contract.model,
            "version": contract.version,
            "content_sha256": contract.content_sha256,
        },
        "n": n,
        "ece": ece,
        "ece_ci": calibrated.get("ece_ci"),
        "nll": {"uncalibrated": before, "calibrated": after},
        "brier": {"uncalibrated": uncalibrated["brier"], "calibrated": calibrated["brier"]},
        "reliability": calibrated["bins"],
        "bin_edges": list(contract.spec.bin_edges),
    }
    decision = "pass" if all(c.passed for c in checks) else "fail"
    return GateOutcome(decision, tuple(checks), evidence, policy)


def _evidence_readings(
    contract: Contract, request: GateRequest
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str | None]:
    """(source, calibrated reading, uncalibrated reading, evaluation fingerprint or None)."""
    if request.evaluation is None:
        baseline = contract.spec.baseline["eval"]
        return (
            {
                "kind": "contract_eval_baseline",
                "fingerprint": contract.spec.split.get("eval_fingerprint"),
            },
            baseline["calibrated"],
            baseline["uncalibrated"],
            None,
        )
    errors = ErrorCollector()
    data: LabeledSet | None = parse_labeled_set(
        request.evaluation,
        "evaluation",
        task=contract.spec.task,
        classes=contract.spec.classes,
        errors=errors,
    )
    errors.raise_if_any("the evaluation set is invalid")
    assert data is not None
    try:
        calibrated = reading_of(
            contract.spec.task, data, contract.edges, contract.calibrator, contract.spec.policy
        ).to_dict()
        uncalibrated = reading_of(
            contract.spec.task, data, contract.edges, IdentityCalibrator(), contract.spec.policy
        ).to_dict()
    except CalibrationInputError as exc:
        raise ValidationFailed(f"the evaluation set cannot be measured: {exc}") from exc
    fingerprint = data.fingerprint()
    return (
        {"kind": "evaluation", "fingerprint": fingerprint},
        calibrated,
        uncalibrated,
        fingerprint,
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
