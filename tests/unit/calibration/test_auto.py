"""``method: auto`` chooses by out-of-fold NLL inside the fit set: temperature where temperature
calibrates perfectly, a non-sigmoid family where the true map is not a sigmoid."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration import default_edges
from service.calibration.auto import ALPHA, FOLDS, beats_p_value, choose, fold_of_rows
from service.contracts.fitting import fit_method
from service.contracts.model import FIT_METHODS


def _fitter(task):
    return lambda method, x, y: fit_method(task, method, x, y)


def test_folds_are_balanced_and_seeded():
    fold = fold_of_rows(103)
    assert np.bincount(fold).tolist() == [21, 21, 21, 20, 20]
    assert np.array_equal(fold, fold_of_rows(103))


def test_the_paired_test_sees_a_consistent_improvement():
    rng = np.random.default_rng(0)
    worse = rng.exponential(size=500)
    assert beats_p_value(worse - 0.05, worse) < 1e-6
    assert beats_p_value(worse, worse - 0.05) > 0.999


@pytest.mark.parametrize("seed", range(3))
def test_auto_keeps_temperature_where_temperature_calibrates_perfectly(seed):
    rng = np.random.default_rng(seed)
    N, K = 1500, 4
    logits = rng.normal(size=(N, K)) * 3.0
    p = np.exp(logits / 1.8)
    p /= p.sum(axis=1, keepdims=True)
    labels = (p.cumsum(axis=1) < rng.random((N, 1))).sum(axis=1)
    selection = choose(
        "multiclass",
        logits,
        labels,
        FIT_METHODS["multiclass"],
        _fitter("multiclass"),
        default_edges(),
    )
    assert selection.chosen == "temperature"
    assert [c.method for c in selection.candidates] == list(FIT_METHODS["multiclass"])
    chosen = selection.candidates[0]
    assert chosen.p_value >= ALPHA and chosen.beaten_by is None
    assert selection.folds == FOLDS


@pytest.mark.parametrize("seed", range(3))
def test_auto_leaves_the_sigmoid_maps_where_the_true_map_is_not_a_sigmoid(seed):
    rng = np.random.default_rng(100 + seed)
    N = 3000
    scores = rng.uniform(0.001, 0.999, size=N)
    truth = scores**4 / (scores**4 + 0.3 * (1 - scores) ** 0.3)
    labels = (rng.random(N) < truth).astype(int)
    selection = choose(
        "binary", scores, labels, FIT_METHODS["binary"], _fitter("binary"), default_edges()
    )
    assert selection.chosen in ("beta", "isotonic")
    by_method = {c.method: c for c in selection.candidates}
    assert by_method["temperature"].beaten_by is not None
    assert by_method["platt"].beaten_by is not None
    record = selection.to_dict()
    assert record["chosen"] == selection.chosen and len(record["candidates"]) == 5
    for candidate in record["candidates"]:
        assert candidate["nll"] > 0 and 0 <= candidate["ece_ci"][0] <= candidate["ece_ci"][1]
