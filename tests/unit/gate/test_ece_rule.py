"""The rules by which ``eval_ece`` judges max_ece, on bin tables whose evidence is known."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration import EceInference, infer_ece
from service.gate.ece_rule import EceRule, fmt, judge_ece


def over_confident(rows_per_bin: int, gap: float, bins: int = 10) -> EceInference:
    """Every bin over-confident by ``gap`` (exact counts): the plug-in ECE is ``gap``."""
    n = np.full(bins, float(rows_per_bin))
    c = np.linspace(0.55, 0.95, bins)
    return infer_ece(n, c * n, np.round((c - gap) * n))


def test_a_debiased_ece_above_max_ece_fails_by_default_even_when_the_interval_holds_it() -> None:
    inference = over_confident(300, 0.07)
    assert inference.lower < 0.06 < inference.debiased
    verdict = judge_ece(EceRule.ESTIMATE, [("top-label", inference)], 0.06)
    assert not verdict.passed
    assert verdict.message == (
        "debiased ECE 0.07 is above max_ece 0.06, and the one-sided 95% lower bound 0.05157 is "
        "above half of it; 95% interval [0.04945, 0.08638]"
    )
    assert verdict.observed["rule"] == "estimate"
    assert verdict.observed["ece_ci"] == [pytest.approx(inference.lower), inference.upper]
    # The older rule wants the evidence to show the ECE above 0.06: it does not.
    shown_above = judge_ece(EceRule.SHOWN_ABOVE, [("top-label", inference)], 0.06)
    assert shown_above.passed
    assert "does not show the ECE above it" in shown_above.message


def test_estimate_passes_at_or_below_max_ece() -> None:
    verdict = judge_ece(EceRule.ESTIMATE, [("top-label", over_confident(300, 0.07))], 0.08)
    assert verdict.passed
    assert verdict.message.startswith("debiased ECE 0.07 is at most max_ece 0.08; 95% interval")


def test_estimate_does_not_fail_on_noise_and_says_so() -> None:
    inference = over_confident(5, 0.2)
    assert inference.debiased > 0.1
    verdict = judge_ece(EceRule.ESTIMATE, [("top-label", inference)], 0.1)
    assert verdict.passed
    assert "but within the noise of this sample" in verdict.message
    assert "not above half of it (0.05)" in verdict.message


def test_shown_below_needs_the_upper_bound_at_or_below_max_ece() -> None:
    inference = over_confident(300, 0.07)
    failed = judge_ece(EceRule.SHOWN_BELOW, [("top-label", inference)], 0.08)
    assert not failed.passed and "upper bound 0.08638 is above max_ece 0.08" in failed.message
    passed = judge_ece(EceRule.SHOWN_BELOW, [("top-label", inference)], 0.09)
    assert passed.passed and "shows the ECE at or below it" in passed.message


def test_two_views_name_the_view_that_decides() -> None:
    calm, hot = over_confident(300, 0.0), over_confident(300, 0.07)
    views = [("top-label", calm), ("positive-class", hot)]
    for rule in (EceRule.ESTIMATE, EceRule.SHOWN_ABOVE):
        verdict = judge_ece(rule, views, 0.03)
        assert not verdict.passed and verdict.observed["view"] == "positive-class"
        assert verdict.message.startswith("positive-class view: ")
    below = judge_ece(EceRule.SHOWN_BELOW, views, 0.05)
    assert not below.passed and below.observed["view"] == "positive-class"
    # Each view of shown_above is tested at half the level.
    assert "one-sided 97.5% lower bound" in judge_ece(EceRule.SHOWN_ABOVE, views, 0.03).message


def test_no_rows_pass_only_the_rules_that_need_no_evidence() -> None:
    empty = infer_ece([0.0], [0.0], [0.0])
    for rule, passed in [
        (EceRule.ESTIMATE, True),
        (EceRule.SHOWN_ABOVE, True),
        (EceRule.SHOWN_BELOW, False),
    ]:
        verdict = judge_ece(rule, [("top-label", empty)], 0.05)
        assert verdict.passed is passed and verdict.message == "no held-out predictions to judge"


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0052341, "0.005234"), (0.05, "0.05"), (0.0, "0"), (1.0, "1"), (2e-9, "2e-09")],
)
def test_numbers_have_four_significant_digits(value: float, text: str) -> None:
    assert fmt(value) == text
