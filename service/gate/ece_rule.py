"""How the gate's ``eval_ece`` check judges the held-out ECE against ``max_ece``: the rules.

* ``estimate`` (the default): fail when the debiased ECE exceeds ``max_ece``. The number the
  user set is the number checked; the interval is reported beside it. One guard keeps it from
  failing on noise: the evidence must also show the ECE above half of ``max_ece`` (one-sided
  95% lower bound above ``GUARD x max_ece``), so a model whose true ECE is at most half the
  threshold fails in at most 5% of samples, whatever their size; with few rows a debiased ECE
  above ``max_ece`` that the noise explains passes, and its message says so.
* ``shown_above``: fail only when the evidence shows the ECE above ``max_ece``: the one-sided
  95% lower bound exceeds it (p < 0.05 for "the true ECE is at most max_ece").
* ``shown_below``: fail unless the evidence shows the ECE at or below ``max_ece``: the upper
  bound of the two-sided 95% interval must not exceed it.

A two-class multiclass model is judged in its top-label and its positive-class view. It fails
``estimate`` or ``shown_above`` when either view does (each view's test at half the level), and
passes ``shown_below`` only when both views do (an intersection-union test, each view at the
full level). Every verdict's message states its rule in words with its numbers, to 4
significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from service.calibration import EceInference

#: The level of ``shown_above``: it fails when p < 0.05 for "the true ECE is at most max_ece".
GATE_ALPHA = 0.05
#: ``estimate`` does not fail on noise: only when the evidence also shows the ECE above this
#: share of ``max_ece`` (so a model at or below it fails in at most ``GATE_ALPHA`` of samples).
GUARD = 0.5
#: The interval the messages report (and ``shown_below`` reads the upper end of).
INTERVAL = "95% interval"


class EceRule(StrEnum):
    """What ``eval_ece`` holds the held-out ECE to (module docstring)."""

    ESTIMATE = "estimate"
    SHOWN_ABOVE = "shown_above"
    SHOWN_BELOW = "shown_below"


@dataclass(frozen=True)
class EceVerdict:
    """A rule's verdict on the views: ``observed`` names the view the message speaks of."""

    passed: bool
    observed: dict[str, Any]
    message: str


def judge_ece(
    rule: EceRule,
    views: Sequence[tuple[str, EceInference]],
    limit: float,
    limit_name: str = "max_ece",
) -> EceVerdict:
    """Judge the ``views`` (name, inference; the first is the model's main view) by ``rule``
    against ``limit`` (named ``limit_name`` in the message).

    Without held-out rows (NaN estimates) ``estimate`` and ``shown_above`` pass (there is no
    evidence of excess; ``eval_samples`` fails such a set) and ``shown_below`` fails.
    """
    alpha = GATE_ALPHA if rule is EceRule.SHOWN_BELOW else GATE_ALPHA / len(views)
    judged = [_View(name, inference, limit, alpha) for name, inference in views]
    if all(math.isnan(v.inference.ece) for v in judged):
        passed = rule is not EceRule.SHOWN_BELOW
        return EceVerdict(passed, judged[0].observed(rule), "no held-out predictions to judge")
    if rule is EceRule.ESTIMATE:
        above = [v for v in judged if not v.debiased <= limit]
        failing = [v for v in above if v.guard_p_value < alpha]
        shown = (failing or above or [max(judged, key=lambda v: v.debiased)])[0]
        says = f"debiased ECE {fmt(shown.debiased)} is "
        if failing:
            says += (
                f"above {limit_name} {fmt(limit)}, and the one-sided {_percent(1.0 - alpha)} "
                f"lower bound {fmt(shown.lower_bound)} is above half of it"
            )
        elif above:
            says += (
                f"above {limit_name} {fmt(limit)}, but within the noise of this sample: the "
                f"one-sided {_percent(1.0 - alpha)} lower bound {fmt(shown.lower_bound)} is not "
                f"above half of it ({fmt(GUARD * limit)})"
            )
        else:
            says += f"at most {limit_name} {fmt(limit)}"
        tail = f"{INTERVAL} {shown.interval}"
    elif rule is EceRule.SHOWN_ABOVE:
        failing = [v for v in judged if v.p_value < alpha]
        shown = failing[0] if failing else max(judged, key=lambda v: v.lower_bound)
        verdict = "above" if failing else "at most"
        level = f"one-sided {_percent(1.0 - alpha)}"
        says = (
            f"the {level} lower bound {fmt(shown.lower_bound)} is {verdict} {limit_name} "
            f"{fmt(limit)} (p = {fmt(shown.p_value, 2)}): the evidence "
            f"{'shows' if failing else 'does not show'} the ECE above it"
        )
        tail = f"debiased ECE {fmt(shown.debiased)}, {INTERVAL} {shown.interval}"
    else:
        failing = [v for v in judged if not v.inference.upper <= limit]
        shown = failing[0] if failing else max(judged, key=lambda v: v.inference.upper)
        verdict = "above" if failing else "at most"
        says = (
            f"the {INTERVAL}'s upper bound {fmt(shown.inference.upper)} is {verdict} "
            f"{limit_name} {fmt(limit)}: the evidence "
            f"{'does not show' if failing else 'shows'} the ECE at or below it"
        )
        tail = f"debiased ECE {fmt(shown.debiased)}, {INTERVAL} {shown.interval}"
    where = f"{shown.name} view: " if len(judged) > 1 else ""
    return EceVerdict(not failing, shown.observed(rule), f"{where}{says}; {tail}")


@dataclass(frozen=True)
class _View:
    name: str
    inference: EceInference
    limit: float
    alpha: float

    @property
    def debiased(self) -> float:
        return self.inference.debiased

    @property
    def p_value(self) -> float:
        return self.inference.exceedance_p_value(self.limit)

    @property
    def lower_bound(self) -> float:
        return self.inference.lower_bound(self.alpha)

    @property
    def guard_p_value(self) -> float:
        return self.inference.exceedance_p_value(GUARD * self.limit)

    @property
    def interval(self) -> str:
        return f"[{fmt(self.inference.lower)}, {fmt(self.inference.upper)}]"

    def observed(self, rule: EceRule) -> dict[str, Any]:
        """The view's numbers, the same keys under every rule."""
        return {
            "rule": rule.value,
            "view": self.name,
            "ece_debiased": number(self.debiased),
            "ece_ci": [number(self.inference.lower), number(self.inference.upper)],
            "lower_bound": number(self.lower_bound),
            "p_value": number(self.p_value),
        }


def number(value: float | None) -> float | None:
    """A float for JSON: None for NaN."""
    return None if value is None or math.isnan(value) else float(value)


def fmt(value: float | None, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits, positional (``0.005234``; scientific below
    1e-6), "n/a" for none."""
    if value is None or math.isnan(value):
        return "n/a"
    if 0.0 < abs(value) < 1e-6:
        return f"{value:.{digits}g}"
    return np.format_float_positional(
        float(value), precision=digits, unique=False, fractional=False, trim="-"
    )


def _percent(share: float) -> str:
    """``0.975`` as ``97.5%``."""
    return f"{share * 100:g}%"
