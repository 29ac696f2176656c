"""Flat float64 vectors of statistics (``service.calibration.packing``) add like the statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.calibration import (
    PlattCalibrator,
    TemperatureCalibrator,
    binary_stats,
    default_edges,
    multiclass_stats,
)
from service.calibration.calibration_stats import AUC_CELLS
from service.calibration.packing import (
    CLASSWISE_MAX_CELLS,
    StatsLayout,
    keeps_classwise,
    pack,
    pack_groups,
    unpack,
    without_classwise,
)
from service.calibration.refit import N_KNOTS
from service.calibration.stats import grouped_stats

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("classwise", [True, False])
def test_multiclass_vectors_add(classwise):
    z, y = RNG.normal(size=(80, 3)), RNG.integers(0, 3, 80)
    edges = default_edges(8)
    a = multiclass_stats(z[:30], y[:30], edges, classwise=classwise)
    b = multiclass_stats(z[30:], y[30:], edges, classwise=classwise)
    layout = StatsLayout("multiclass", tuple(edges.tolist()), 3, classwise=classwise)
    assert pack(a).shape == (layout.size,)
    assert unpack(pack(a) + pack(b), layout).to_dict() == (a + b).to_dict()


@pytest.mark.parametrize("refit", [True, False])
def test_the_columns_without_classwise_tables_pack_the_smaller_layout(refit):
    z, y = RNG.normal(size=(50, 4)), RNG.integers(0, 4, 50)
    edges = default_edges(6)
    layout = StatsLayout("multiclass", tuple(edges.tolist()), 4, refit=refit)
    knots = np.arange(float(layout.size - layout.stats_size))
    full = np.concatenate([pack(multiclass_stats(z, y, edges, classwise=True)), knots])
    smaller, columns = without_classwise(layout)
    alone = np.concatenate([pack(multiclass_stats(z, y, edges, classwise=False)), knots])
    assert not smaller.classwise and columns.shape == (smaller.size,)
    assert np.array_equal(full[columns], alone)


def test_binary_vectors_add():
    s, y = RNG.random(60), RNG.integers(0, 2, 60)
    a = binary_stats(s[:25], y[:25], default_edges(), threshold=0.3)
    b = binary_stats(s[25:], y[25:], default_edges(), threshold=0.3)
    layout = StatsLayout("binary", tuple(default_edges().tolist()), 2, threshold=0.3)
    assert unpack(pack(a) + pack(b), layout).to_dict() == (a + b).to_dict()
    with pytest.raises(ValueError):
        unpack(pack(a)[:-1], layout)


@given(
    n=st.integers(1, 60),
    groups=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    binary=st.booleans(),
    classwise=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_grouped_statistics_equal_per_group_statistics(
    n: int, groups: int, seed: int, binary: bool, classwise: bool
) -> None:
    rng = np.random.default_rng(seed)
    edges = np.array([0.0, 0.3, 0.5, 0.9, 1.0])
    group = rng.integers(0, groups, n)
    if binary:
        inputs, labels, K = rng.uniform(size=n), rng.integers(0, 2, n), 2
        calibrator = PlattCalibrator(0.7, -0.2)
        layout = StatsLayout("binary", tuple(edges), 2, threshold=0.4)
    else:
        K = 4
        inputs, labels = rng.normal(size=(n, K)) * 2, rng.integers(0, K, n)
        calibrator = TemperatureCalibrator(1.3)
        layout = StatsLayout("multiclass", tuple(edges), K, classwise=classwise)
    matrix = pack_groups(
        grouped_stats(
            layout.task,
            inputs,
            labels,
            edges,
            group,
            groups,
            calibrator=calibrator,
            threshold=0.4,
            classwise=classwise,
        )
    )
    assert matrix.shape == (groups, layout.size)
    for g in range(groups):
        rows = group == g
        if binary:
            direct = binary_stats(
                inputs[rows], labels[rows], edges, calibrator=calibrator, threshold=0.4
            )
        else:
            direct = multiclass_stats(
                inputs[rows], labels[rows], edges, calibrator=calibrator, classwise=classwise
            )
        np.testing.assert_allclose(matrix[g], pack(direct), rtol=1e-12, atol=1e-12)


def row_values(task: str, K: int, M: int) -> int:
    """The float64 values of a bucket row by the documented formula: its packed statistics
    with the refit knot sums, and its M confidence counts."""
    if task == "binary":
        return 5 + 3 * M + 2 + 4 + 2 * AUC_CELLS + 3 * N_KNOTS + M
    tables = 3 * K * M if K * M <= CLASSWISE_MAX_CELLS else 0
    return 5 + 3 * M + K + tables + 3 * N_KNOTS + M


#: The documented bound on the bytes of one bucket row, for every K <= 1,000 and M <= 100.
ROW_BYTES_BOUND = 43_000


@pytest.mark.parametrize("K", [2, 3, 10, 15, 16, 100, 101, 150, 500, 750, 1000])
@pytest.mark.parametrize("M", [1, 2, 10, 15, 16, 100])
def test_the_layout_size_is_the_documented_formula(K: int, M: int) -> None:
    edges = tuple(default_edges(M).tolist())
    layout = StatsLayout("multiclass", edges, K, keeps_classwise("multiclass", K, M), refit=True)
    assert layout.size + M == row_values("multiclass", K, M)
    binary = StatsLayout("binary", edges, 2, keeps_classwise("binary", 2, M), refit=True)
    assert not binary.classwise and binary.size + M == row_values("binary", 2, M)


def test_every_bucket_row_stays_under_the_documented_bound() -> None:
    largest = max(
        8 * row_values(task, K, M)
        for task, Ks in (("multiclass", range(2, 1001)), ("binary", (2,)))
        for K in Ks
        for M in range(1, 101)
    )
    assert largest == 8 * row_values("multiclass", 750, 2) <= ROW_BYTES_BOUND
    assert 8 * row_values("multiclass", 1000, 100) == 12_128


def test_class_wise_tables_are_kept_up_to_the_cell_limit() -> None:
    assert CLASSWISE_MAX_CELLS == 1500
    assert all(keeps_classwise("multiclass", 2, M) for M in range(1, 101))
    assert keeps_classwise("multiclass", 100, 15) and not keeps_classwise("multiclass", 100, 16)
    assert keeps_classwise("multiclass", 15, 100) and not keeps_classwise("multiclass", 16, 100)
    assert not keeps_classwise("multiclass", 1000, 100) and not keeps_classwise("binary", 2, 1)
