"""The gate's checks, each on a contract fitted in memory from the reference sets."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from service.common.errors import ErrorCollector, ValidationFailed
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import parse_labeled_set
from service.contracts.model import Contract
from service.contracts.requests import FitRequest, parse_spec_fields
from service.gate.checks import CHECKS, GateOutcome, evaluate_gate
from service.gate.requests import parse_gate_request
from tests.integration.factories import (
    REFERENCE_EVAL_LABELS,
    REFERENCE_EVAL_LOGITS,
    REFERENCE_FIT_LABELS,
    REFERENCE_FIT_LOGITS,
    contract_fields,
)


def labeled(logits: list[list[float]], labels: list[int]) -> Any:
    errors = ErrorCollector()
    data = parse_labeled_set(
        {"logits": logits, "labels": labels},
        "set",
        task="multiclass",
        classes=["a", "b", "c"],
        errors=errors,
    )
    errors.raise_if_any()
    return data


@pytest.fixture(scope="module")
def contract() -> Contract:
    errors = ErrorCollector()
    fields = parse_spec_fields(contract_fields(), errors)
    errors.raise_if_any()
    fit = labeled(REFERENCE_FIT_LOGITS, REFERENCE_FIT_LABELS)
    held_out = labeled(REFERENCE_EVAL_LOGITS, REFERENCE_EVAL_LABELS)
    spec = fit_contract_spec(FitRequest(fields, "temperature", fit, held_out))
    return Contract("c-1", 1, spec, datetime(2026, 11, 1, tzinfo=UTC), "tests", "0" * 64)


def gate(contract: Contract, source: str = "measured", **body: Any) -> GateOutcome:
    request = parse_gate_request({"contract_id": contract.id, **body})
    return evaluate_gate(contract, request, source)  # type: ignore[arg-type]


def checks(outcome: GateOutcome) -> dict[str, bool]:
    return {c.name: c.passed for c in outcome.checks}


def test_the_default_policy_runs_the_default_checks(contract: Contract) -> None:
    outcome = gate(contract)
    optional = {"measured_baseline", "eval_ece_ci_upper", "live_status"}
    every = [check.__name__.removeprefix("_") for check in CHECKS]
    assert list(checks(outcome)) == [name for name in every if name not in optional]
    # 8 held-out rows against the default 500: the gate fails on the sample count, and the ECE
    # check says its estimate lies above max_ece within the noise of 8 rows.
    assert outcome.decision == "fail"
    assert {k for k, v in checks(outcome).items() if not v} == {"eval_samples"}
    assert outcome.policy["ece_rule"] == "estimate"
    ece = next(c for c in outcome.checks if c.name == "eval_ece")
    assert ece.message.startswith("debiased ECE 0.269 is above max_ece 0.1, but within the noise")


def test_a_small_enough_sample_passes(contract: Contract) -> None:
    outcome = gate(contract, policy={"min_eval_samples": 8, "max_ece": 1.0})
    assert outcome.decision == "pass", [c.message for c in outcome.checks if not c.passed]
    assert outcome.evidence["n"] == 8 and outcome.evidence["baseline_source"] == "measured"
    assert sum(b["n"] for b in outcome.evidence["reliability"]) == 8


def test_optional_checks_run_only_when_asked(contract: Contract) -> None:
    outcome = gate(
        contract,
        "supplied",
        policy={"max_ece_ci_upper": 0.0, "require_measured_baseline": True, "min_bin_samples": 9},
    )
    got = checks(outcome)
    assert got["eval_ece_ci_upper"] is False
    assert got["measured_baseline"] is False
    assert got["bin_samples"] is False


def test_a_shared_fingerprint_fails_the_disjoint_check(contract: Contract) -> None:
    split = replace(contract.spec.split, eval_fingerprint=contract.spec.split.fit_fingerprint)
    leaky = replace(contract, spec=replace(contract.spec, split=split))
    assert checks(gate(leaky))["disjoint_eval"] is False
    relaxed = gate(leaky, policy={"require_disjoint_eval": False})
    assert checks(relaxed)["disjoint_eval"] is True


def test_a_fresh_evaluation_set_is_measured_under_the_contracts_calibrator(
    contract: Contract,
) -> None:
    evaluation = {"logits": REFERENCE_EVAL_LOGITS, "labels": REFERENCE_EVAL_LABELS}
    outcome = gate(contract, evaluation=evaluation, policy={"require_measured_baseline": True})
    assert outcome.evidence["source"]["kind"] == "evaluation"
    assert checks(outcome)["measured_baseline"] is True
    stored = gate(contract)
    assert outcome.evidence["ece"] == pytest.approx(stored.evidence["ece"])


def test_an_invalid_evaluation_set_names_its_row(contract: Contract) -> None:
    with pytest.raises(ValidationFailed) as info:
        gate(contract, evaluation={"logits": [[1, 2]], "labels": [0]})
    assert [d.field for d in info.value.details] == ["evaluation.logits[0]"]


def test_the_policy_falls_back_to_the_contracts_max_ece(contract: Contract) -> None:
    outcome = gate(contract)
    assert outcome.policy["max_ece"] == contract.policy.max_ece
    assert len(outcome.evidence_sha256) == len(outcome.policy_sha256) == 64
