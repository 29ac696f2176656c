"""Flat float64 vectors of statistics (``service.calibration.packing``) add like the statistics."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration import binary_stats, default_edges, multiclass_stats
from service.calibration.packing import StatsLayout, pack, unpack

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


def test_binary_vectors_add():
    s, y = RNG.random(60), RNG.integers(0, 2, 60)
    a = binary_stats(s[:25], y[:25], default_edges(), threshold=0.3)
    b = binary_stats(s[25:], y[25:], default_edges(), threshold=0.3)
    layout = StatsLayout("binary", tuple(default_edges().tolist()), 2, threshold=0.3)
    assert unpack(pack(a) + pack(b), layout).to_dict() == (a + b).to_dict()
    with pytest.raises(ValueError):
        unpack(pack(a)[:-1], layout)
