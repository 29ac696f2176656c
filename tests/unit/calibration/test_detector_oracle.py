"""The oracle CUSUM the detectors are measured against: its tuning and its place as a bound."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration.drift import DriftPolicy
from tests.support.rule_simulation import Oracle, baseline_levels, labels_to_alert
from tests.support.simulation import RowPool, scenario

DEFAULT = DriftPolicy(max_ece=0.05, max_ece_increase=0.02, min_labeled=200)


@pytest.mark.slow
def test_the_tuned_threshold_gives_the_asked_mean_time_to_a_false_alarm():
    """Extrapolated from run lengths at two lower thresholds, checked where it can be measured."""
    rng = np.random.default_rng(21)
    oracle = Oracle(RowPool(scenario("beta25", "constant", 2.0), rng, 200_000))
    threshold = oracle.tune(rng, target=60_000)
    measured = oracle.run_lengths(rng, threshold, 60).mean()
    assert 60_000 / 1.6 <= measured <= 60_000 * 1.6


def test_the_oracle_detects_a_step_sooner_than_the_detectors():
    rng = np.random.default_rng(22)
    before = RowPool(scenario("beta25", "constant", 0.0), rng, 200_000)
    after = RowPool(scenario("beta25", "constant", 2.0), rng, 200_000)
    oracle = Oracle(after)
    oracle.tune(rng)
    best = oracle.delays(rng, 40, 7200, 20_000)
    levels = baseline_levels(before, rng, 2000, 1, DEFAULT)[0]
    detected = labels_to_alert(before, after, levels, rng, 20)
    assert (best > 0).all() and (detected > 0).all()
    assert np.median(best) < np.median(detected)
