"""Turn a batch of predictions (and labels) into additions to time buckets per slice."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from service.calibration import (
    CalibrationStats,
    binary_probabilities,
    binary_stats,
    multiclass_probabilities,
    multiclass_stats,
)
from service.calibration.packing import StatsLayout, pack
from service.contracts import Contract
from service.storage.buckets import BucketDelta, BucketKey
from service.windows import RESOLUTION_HOUR, RESOLUTION_MINUTE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def threshold_of(contract: Contract) -> float:
    """The binary decision threshold: ``c_fp / (c_fp + c_fn)`` when costs are set, else 0.5."""
    policy = contract.spec.policy
    if policy.get("c_fp") is not None and policy.get("c_fn") is not None:
        return float(policy["c_fp"]) / (float(policy["c_fp"]) + float(policy["c_fn"]))
    return 0.5


def layout_of(contract: Contract) -> StatsLayout:
    """The shape of a contract's bucket statistics."""
    spec = contract.spec
    return StatsLayout(
        task=spec.task,
        edges=spec.bin_edges,
        n_classes=len(spec.classes),
        classwise=True,
        threshold=threshold_of(contract),
    )


def expected_correctness(contract: Contract, inputs: np.ndarray) -> np.ndarray:
    """Per row, the probability its prediction is right under the contract's calibrator.

    Multiclass: the top-label confidence. Binary: ``p`` when predicted positive (``p >= tau``),
    else ``1 - p``.
    """
    if contract.spec.task == "multiclass":
        return multiclass_probabilities(contract.calibrator, inputs).max(axis=1)
    p = binary_probabilities(contract.calibrator, inputs)
    return np.where(p >= threshold_of(contract), p, 1.0 - p)


def labeled_stats(contract: Contract, inputs: np.ndarray, labels: np.ndarray) -> CalibrationStats:
    """Statistics of labeled rows under the contract's calibrator, edges and threshold."""
    spec = contract.spec
    if spec.task == "multiclass":
        return multiclass_stats(inputs, labels, contract.edges, calibrator=contract.calibrator)
    return binary_stats(
        inputs,
        labels,
        contract.edges,
        calibrator=contract.calibrator,
        threshold=threshold_of(contract),
    )


def _minute_starts(ts: Sequence[datetime]) -> np.ndarray:
    return np.array([int((t - _EPOCH).total_seconds()) // 60 for t in ts], dtype=np.int64)


def bucket_deltas(
    contract: Contract,
    *,
    ts: Sequence[datetime],
    slices: Sequence[Sequence[str]],
    inputs: np.ndarray,
    labels: np.ndarray,
    new: bool,
) -> dict[BucketKey, BucketDelta]:
    """What rows of one contract add to their minute and hour buckets, per slice.

    ``labels`` holds a class index per row, or -1 for rows still unlabeled. ``new`` rows are
    predictions being stored now (they count in ``n_predictions``; unlabeled ones add their
    expected correctness); otherwise the rows are stored predictions whose labels just arrived,
    and their expected correctness moves out of the unlabeled sum.
    """
    expected = expected_correctness(contract, inputs)
    minutes = _minute_starts(ts)
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for row, (minute, row_slices) in enumerate(zip(minutes, slices, strict=True)):
        for name in row_slices:
            groups[(name, int(minute))].append(row)
    deltas: dict[BucketKey, BucketDelta] = {}
    for (name, minute), rows in groups.items():
        idx = np.asarray(rows)
        labeled = idx[labels[idx] >= 0]
        unlabeled_sum = (
            float(expected[idx[labels[idx] < 0]].sum()) if new else -float(expected[labeled].sum())
        )
        vector = (
            pack(labeled_stats(contract, inputs[labeled], labels[labeled]))
            if labeled.size
            else None
        )
        minute_start = _EPOCH + timedelta(minutes=minute)
        hour_start = _EPOCH + timedelta(hours=minute // 60)
        for key in (
            (name, RESOLUTION_MINUTE, minute_start, contract.id),
            (name, RESOLUTION_HOUR, hour_start, contract.id),
        ):
            delta = deltas.setdefault(key, BucketDelta())
            delta.n_predictions += idx.size if new else 0
            delta.n_labeled += int(labeled.size)
            delta.unlabeled_expected_correct += unlabeled_sum
            if vector is not None:
                delta.stats = vector.copy() if delta.stats is None else delta.stats + vector
    return deltas


def merge_deltas(
    into: dict[BucketKey, BucketDelta], other: dict[BucketKey, BucketDelta]
) -> dict[BucketKey, BucketDelta]:
    """Add ``other`` into ``into`` key by key (returns ``into``)."""
    for key, delta in other.items():
        mine = into.setdefault(key, BucketDelta())
        mine.n_predictions += delta.n_predictions
        mine.n_labeled += delta.n_labeled
        mine.unlabeled_expected_correct += delta.unlabeled_expected_correct
        if delta.stats is not None:
            mine.stats = delta.stats.copy() if mine.stats is None else mine.stats + delta.stats
    return into
