"""The gate request as a model: the policy's defaults and the evaluation's float64 check."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from service.common.errors import ValidationFailed
from service.gate.requests import DEFAULT_GATE_POLICY, parse_gate_request

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def test_an_absent_or_null_policy_is_every_default() -> None:
    for body in ({"contract_id": "c"}, {"contract_id": "c", "policy": None}):
        request = parse_gate_request(body, NOW)
        assert request.policy == DEFAULT_GATE_POLICY and request.evaluation is None


def test_a_policy_keeps_max_ece_only_when_set() -> None:
    policy = parse_gate_request({"contract_id": "c", "policy": {"min_bin_samples": 3}}, NOW).policy
    assert policy == {**DEFAULT_GATE_POLICY, "min_bin_samples": 3}
    policy = parse_gate_request({"contract_id": "c", "policy": {"max_ece": 1}}, NOW).policy
    assert policy == {"max_ece": 1.0, **DEFAULT_GATE_POLICY}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, [("contract_id", "required field is missing")]),
        (
            {"contract_id": "a b"},
            [("contract_id", "may contain only letters, digits and . _ : - (max 200)")],
        ),
        (
            {"contract_id": "c", "policy": {"max_ece": "0.1"}},
            [("policy.max_ece", "expected a number in [0, 1]")],
        ),
        (
            {"contract_id": "c", "policy": {"max_ece": 10**400}},
            [("policy.max_ece", "must be a number in [0, 1]")],
        ),
        (
            {"contract_id": "c", "policy": {"min_eval_samples": True}},
            [("policy.min_eval_samples", "expected an integer")],
        ),
        (
            {"contract_id": "c", "policy": {"require_disjoint_eval": 1}},
            [("policy.require_disjoint_eval", "expected true or false")],
        ),
        (
            {"contract_id": "c", "evaluation": {"scores": [0.5, 10**400], "labels": [1, 0]}},
            [("evaluation.scores[1]", "must be finite (beyond the range of a float64)")],
        ),
    ],
)
def test_problems_are_named(body: Any, expected: list[tuple[str, str]]) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_gate_request(body, NOW)
    assert [(d.field, d.message) for d in info.value.details] == expected
