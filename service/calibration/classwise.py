"""Class-wise reliability of multiclass statistics: one reliability table per class.

For class k every labeled row contributes its calibrated probability ``p_k`` (whatever the
prediction), binned on the statistics' edges; bin m of class k holds ``class_bin_count[k, m]``
rows whose ``p_k`` sum to ``class_bin_prob_sum[k, m]`` and of which
``class_bin_label_sum[k, m]`` have true class k. The bin's mean probability is compared with the
observed frequency of class k, with a 95% Wilson interval, as in a top-label reliability bin.
A class's ECE is ``sum_m |prob_sum[k, m] - label_sum[k, m]| / N`` (its mean over classes is the
reading's ``classwise_ece``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.calibration.calibration_stats import CalibrationStats
from service.calibration.errors import CalibrationInputError
from service.calibration.intervals import wilson_interval
from service.calibration.readings import ReliabilityBin
from service.calibration.vocabulary import Task


@dataclass(frozen=True)
class ClassReliability:
    """Reliability of class ``k`` (0-based): ``support`` rows of that true class among ``n``,
    ``ece`` its class-wise ECE (NaN without rows) and its non-empty ``bins``."""

    k: int
    n: int
    support: int
    ece: float
    bins: tuple[ReliabilityBin, ...]


def class_reliability(stats: CalibrationStats) -> tuple[ClassReliability, ...]:
    """Every class's reliability table, from multiclass statistics with class-wise tables."""
    if stats.task != Task.MULTICLASS or stats.class_bin_count is None:
        raise CalibrationInputError("stats", "class-wise tables need multiclass statistics")
    assert stats.class_bin_prob_sum is not None and stats.class_bin_label_sum is not None
    counts = stats.class_bin_count
    prob_sums = stats.class_bin_prob_sum
    label_sums = stats.class_bin_label_sum
    lower, upper = wilson_interval(label_sums, counts)
    out = []
    for k in range(stats.n_classes):
        occupied = np.flatnonzero(counts[k])
        gap = float(np.abs(prob_sums[k] - label_sums[k]).sum())
        bins = tuple(
            ReliabilityBin(
                lo=float(stats.edges[m]),
                hi=float(stats.edges[m + 1]),
                n=int(counts[k, m]),
                mean_confidence=float(prob_sums[k, m] / counts[k, m]),
                accuracy=float(label_sums[k, m] / counts[k, m]),
                ci_lower=float(lower[k, m]),
                ci_upper=float(upper[k, m]),
            )
            for m in occupied
        )
        out.append(
            ClassReliability(
                k=k,
                n=stats.n,
                support=int(stats.label_counts[k]),
                ece=gap / stats.n if stats.n else float("nan"),
                bins=bins,
            )
        )
    return tuple(out)
