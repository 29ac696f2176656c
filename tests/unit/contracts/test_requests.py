"""The contract bodies as models: what a fit request gives back, and the cross-field rules
reported beside every other problem."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from service.common.errors import ErrorCollector, ValidationFailed
from service.contracts.model import DataWindow, Split
from service.contracts.requests import parse_fit_request, parse_retirement, parse_spec_fields
from service.contracts.spec_bodies import DEFAULT_POLICY, EqualMass
from tests.integration.factories import contract_fields, fit_body

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def problems_of(body: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationFailed) as info:
        parse_fit_request(body, NOW)
    return [(d.field, d.message) for d in info.value.details]


def test_a_fit_request_gives_the_spec_in_its_stored_forms() -> None:
    request = parse_fit_request(fit_body(split={"method": "m", "fit_fingerprint": "AB" * 32}), NOW)
    fields = request.fields
    assert fields["classes"] == ("a", "b", "c")
    assert fields["data_window"] == DataWindow(
        "2026-10-01T00:00:00.000000Z", "2026-10-31T00:00:00.000000Z"
    )
    assert fields["split"] == Split("m", "ab" * 32, None)
    assert fields["bin_edges"] == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert fields["policy"] == {"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5}
    assert request.method == "temperature" and request.fit.inputs.shape == (6, 3)


def test_defaults_fill_what_is_left_out() -> None:
    body = fit_body(task="binary", classes=None, bin_edges={"equal_mass": 4}, policy=None)
    body["fit"] = {"scores": [0.1, 0.9], "labels": [0, 1]}
    body["eval"] = {"scores": [0.2, 0.8], "labels": [0, 1]}
    del body["objective"]
    fields = parse_fit_request(body, NOW).fields
    assert fields["classes"] == ("negative", "positive")
    assert fields["objective"] == "nll"
    assert fields["bin_edges"] == EqualMass(4)
    assert fields["policy"] == DEFAULT_POLICY


def test_the_costs_come_together_and_are_reported_beside_other_problems() -> None:
    assert problems_of(fit_body(policy={"max_ece": 2, "c_fp": 1})) == [
        ("policy.max_ece", "must be <= 1"),
        ("policy.c_fp", "set both c_fp and c_fn, or neither"),
    ]
    policy = {"c_fp": 2, "c_fn": 1}
    assert parse_fit_request(fit_body(policy=policy), NOW).fields["policy"] == {
        **DEFAULT_POLICY,
        **policy,
    }


def test_a_method_of_another_task_is_reported_after_every_other_problem() -> None:
    body = fit_body(method="platt", surprise=1, bin_edges=[0, 2])
    assert [field for field, _ in problems_of(body)] == ["surprise", "bin_edges", "method"]


def test_class_names_refused_as_a_set_still_judge_the_labeled_sets() -> None:
    found = problems_of(fit_body(classes=["a", "a"]))
    assert found[0] == ("classes", "class names must be unique")
    assert ("fit.logits[0]", "expected a list of 2 numbers") in found


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"task": 1}, [("task", "expected a non-empty string")]),
        ({"task": "ternary"}, [("task", "must be one of binary, multiclass")]),
        ({"classes": "abc"}, [("classes", "expected a list of class names")]),
        ({"classes": ["a", ""]}, [("classes[1]", "expected a non-empty string")]),
        (
            {"split": {"method": "m", "eval_fingerprint": "xyz"}},
            [("split.eval_fingerprint", "expected a SHA-256 as 64 hexadecimal characters")],
        ),
        ({"bin_edges": [0, 0.5, 10**400]}, [("bin_edges[2]", "expected a finite number")]),
        ({"bin_edges": {"equal_mass": 101}}, [("bin_edges.equal_mass", "must be <= 100")]),
        (
            {"policy": {"min_labeled": 2**60}},
            [("policy.min_labeled", "must lie within +-9007199254740991 (2^53 - 1)")],
        ),
        ({"policy": {"c_fp": None, "c_fn": 1}}, [("policy.c_fp", "expected a number")]),
    ],
)
def test_fields_are_named_with_their_problems(
    override: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert problems_of(fit_body(**override)) == expected


def test_spec_fields_alone_and_the_other_parsers() -> None:
    errors = ErrorCollector()
    assert parse_spec_fields(contract_fields(), errors, NOW)["model"] == "glyphs" and not errors
    fields = parse_spec_fields(contract_fields(population=""), errors, NOW)
    assert [d.field for d in errors.details] == ["population"]
    assert fields["task"] == "multiclass" and fields["model"] is None
    assert parse_retirement({"reason": "superseded"}, NOW) == "superseded"
    with pytest.raises(ValidationFailed):
        parse_retirement({"reason": "a\x00b"}, NOW)
