"""A model's series budget: which of its cohort slices the refresher keeps readings of and
exports to Prometheus.

``all`` always, then the slices with the most labeled predictions over all time (ties by name),
up to ``max_slices_per_model`` slices in all. All-time counts only grow, and only when the
model's buckets are written, so the choice changes only with new data, never with the passing
of time. To keep two slices growing at about the same rate from swapping places on every
refresh, a slice already exported counts its labeled predictions ``KEEP_FACTOR`` times: a slice
outside the budget replaces one inside only once it has more than 25% more labeled predictions.
The other slices stay readable through ``GET /v1/models/{model}/calibration?cohort=...`` and
``/cohorts``; ``calmon_slices_unexported{model}`` counts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from service.stream.cohorts import ALL

#: How much an exported slice's labeled predictions weigh against a challenger's.
KEEP_FACTOR = 1.25


@dataclass(frozen=True)
class SliceExport:
    """The slices of a model exported (``all`` first, then by rank) and how many are not."""

    exported: tuple[str, ...]
    unexported: int


def choose_exported(
    labeled: Iterable[tuple[str, int]], previous: Sequence[str], budget: int
) -> SliceExport:
    """The slices to export, from each slice's labeled predictions (all time), the slices
    exported before and the budget (slices in all, ``all`` included, at least 1)."""
    counts = {name: n for name, n in labeled if name != ALL}
    kept = set(previous)

    def rank(name: str) -> tuple[float, str]:
        weight = KEEP_FACTOR if name in kept else 1.0
        return (-counts[name] * weight, name)

    chosen = sorted(counts, key=rank)[: max(budget - 1, 0)]
    return SliceExport((ALL, *chosen), len(counts) - len(chosen))
