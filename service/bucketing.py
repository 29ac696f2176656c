"""Turn a batch of predictions (and labels) into additions to time buckets per slice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from service.calibration import (
    binary_probabilities,
    multiclass_probabilities,
)
from service.calibration.packing import StatsLayout, pack_groups
from service.calibration.stats import grouped_stats
from service.contracts import Contract
from service.storage.buckets import BucketDelta, BucketKey
from service.windows import FINE, HOUR, RESOLUTION_FINE, RESOLUTION_HOUR

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


def epoch_seconds(ts: Sequence[datetime]) -> np.ndarray:
    """Whole seconds since the epoch (floor), exactly, as int64."""
    second = timedelta(seconds=1)
    return np.array([(t - _EPOCH) // second for t in ts], dtype=np.int64)


def _expand_slices(slices: Sequence[Sequence[str]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Flatten rows x their slices: ``(slice names, row of each pair, slice id of each pair)``."""
    names: dict[str, int] = {}
    combos: dict[tuple[str, ...], int] = {}
    combo_slices: list[list[int]] = []
    combo_of_row = np.empty(len(slices), dtype=np.int64)
    for row, row_slices in enumerate(slices):
        key = tuple(row_slices)
        combo = combos.get(key)
        if combo is None:
            combo = combos[key] = len(combo_slices)
            combo_slices.append([names.setdefault(n, len(names)) for n in key])
        combo_of_row[row] = combo
    rows_parts, slice_parts = [], []
    for combo, ids in enumerate(combo_slices):
        rows = np.flatnonzero(combo_of_row == combo)
        for sid in ids:
            rows_parts.append(rows)
            slice_parts.append(np.full(rows.size, sid, dtype=np.int64))
    return list(names), np.concatenate(rows_parts), np.concatenate(slice_parts)


def bucket_deltas(
    contract: Contract,
    *,
    seconds: np.ndarray,
    slices: Sequence[Sequence[str]],
    inputs: np.ndarray,
    labels: np.ndarray,
    new: bool,
) -> dict[BucketKey, BucketDelta]:
    """What rows of one contract add to their 5-minute and hour buckets, per slice.

    ``seconds`` is each row's event time in whole seconds since the epoch (``epoch_seconds``);
    ``labels`` holds a class index per row, or -1 for rows still unlabeled. ``new`` rows are
    predictions being stored now (they count in ``n_predictions``; unlabeled ones add their
    expected correctness); otherwise the rows are stored predictions whose labels just arrived,
    and their expected correctness moves out of the unlabeled sum. Statistics of every bucket
    come from one grouped pass over the rows.
    """
    if len(seconds) == 0:
        return {}
    expected = expected_correctness(contract, inputs)
    fine = np.asarray(seconds, dtype=np.int64) // int(FINE.total_seconds())
    names, pair_row, pair_slice = _expand_slices(slices)
    per_hour = HOUR // FINE
    fine_keys, fine_group = np.unique(
        np.column_stack([pair_slice, fine[pair_row]]), axis=0, return_inverse=True
    )
    fine_group = fine_group.ravel()
    n_groups = fine_keys.shape[0]
    labeled = labels[pair_row] >= 0
    weight = (
        np.where(labeled, -expected[pair_row], 0.0)
        if not new
        else np.where(labeled, 0.0, expected[pair_row])
    )
    columns = {
        "n_predictions": np.bincount(fine_group, minlength=n_groups)
        if new
        else np.zeros(n_groups, np.int64),
        "n_labeled": np.bincount(fine_group, weights=labeled, minlength=n_groups)
        .round()
        .astype(np.int64),
        "unlabeled": np.bincount(fine_group, weights=weight, minlength=n_groups),
    }
    stats = np.zeros((n_groups, layout_of(contract).size))
    has_stats = columns["n_labeled"] > 0
    if labeled.any():
        rows = pair_row[labeled]
        stats = pack_groups(
            grouped_stats(
                contract.spec.task,
                inputs[rows],
                labels[rows],
                contract.edges,
                fine_group[labeled],
                n_groups,
                calibrator=contract.calibrator,
                threshold=threshold_of(contract),
            )
        )
    hour_keys, hour_group = np.unique(
        np.column_stack([fine_keys[:, 0], fine_keys[:, 1] // per_hour]), axis=0, return_inverse=True
    )
    hour_group = hour_group.ravel()
    order = np.argsort(hour_group, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(hour_group[order]) != 0])

    def by_hour(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[order], starts, axis=0)

    deltas: dict[BucketKey, BucketDelta] = {}
    for keys, cols, matrix, mask, resolution, step in (
        (fine_keys, columns, stats, has_stats, RESOLUTION_FINE, FINE),
        (
            hour_keys,
            {k: by_hour(v) for k, v in columns.items()},
            by_hour(stats),
            by_hour(has_stats.astype(np.int64)) > 0,
            RESOLUTION_HOUR,
            HOUR,
        ),
    ):
        for i, (sid, index) in enumerate(keys.tolist()):
            deltas[(names[sid], resolution, _EPOCH + index * step, contract.id)] = BucketDelta(
                n_predictions=int(cols["n_predictions"][i]),
                n_labeled=int(cols["n_labeled"][i]),
                unlabeled_expected_correct=float(cols["unlabeled"][i]),
                stats=matrix[i] if mask[i] else None,
            )
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
