"""Turn a batch of predictions (and labels) into additions to time buckets per slice."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from service.calibration import (
    binary_probabilities,
    multiclass_probabilities,
)
from service.calibration.binning import bin_index, is_equal_width
from service.calibration.calibrators import binary_log_odds, temperature_of
from service.calibration.packing import StatsLayout, pack_groups
from service.calibration.refit import grouped_knot_sums
from service.calibration.stats import grouped_stats
from service.contracts.model import Contract
from service.stream.bucket_store import BucketDelta, BucketKey
from service.stream.windows import FINE, HOUR, RESOLUTION_FINE, RESOLUTION_HOUR

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def layout_of(contract: Contract) -> StatsLayout:
    """The shape of a contract's bucket statistics."""
    spec = contract.spec
    return StatsLayout(
        task=spec.task,
        edges=spec.bin_edges,
        n_classes=len(spec.classes),
        classwise=True,
        threshold=contract.threshold,
        refit=True,
    )


def confidence_and_expected_correctness(
    contract: Contract, inputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the confidence the reliability bins use and the probability the row is right.

    Multiclass: both are the top-label confidence. Binary: the confidence is ``p``; the row is
    right with probability ``p`` when predicted positive (``p >= tau``), else ``1 - p``.
    """
    if contract.spec.task == "multiclass":
        top = multiclass_probabilities(contract.calibrator, inputs).max(axis=1)
        return top, top
    p = binary_probabilities(contract.calibrator, inputs)
    return p, np.where(p >= contract.threshold, p, 1.0 - p)


def _knot_sums(
    contract: Contract, inputs: np.ndarray, labels: np.ndarray, group: np.ndarray, n_groups: int
) -> np.ndarray:
    """The (G, 3 J) refit-temperature knot sums of labeled rows per group (see ``refit``)."""
    calibrator = contract.calibrator
    if contract.spec.task == "multiclass":
        sums = grouped_knot_sums(
            "multiclass", inputs, labels, group, n_groups, temperature=temperature_of(calibrator)
        )
    else:
        log_odds = binary_log_odds(calibrator, np.asarray(inputs, dtype=np.float64))
        sums = grouped_knot_sums("binary", log_odds, labels, group, n_groups)
    return sums.reshape(n_groups, -1)


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
    confidence, expected = confidence_and_expected_correctness(contract, inputs)
    fine = np.asarray(seconds, dtype=np.int64) // int(FINE.total_seconds())
    names, pair_row, pair_slice = _expand_slices(slices)
    per_hour = HOUR // FINE
    fine_keys, fine_group = np.unique(
        np.column_stack([pair_slice, fine[pair_row]]), axis=0, return_inverse=True
    )
    fine_group = fine_group.ravel()
    n_groups = fine_keys.shape[0]
    labeled = labels[pair_row] >= 0
    moved = np.where(labeled, -1.0, 0.0) if not new else np.where(labeled, 0.0, 1.0)
    weight = moved * expected[pair_row]
    n_bins = contract.edges.size - 1
    confidence_bin = bin_index(confidence, contract.edges, is_equal_width(contract.edges))
    columns = {
        "n_predictions": np.bincount(fine_group, minlength=n_groups)
        if new
        else np.zeros(n_groups, np.int64),
        "n_labeled": np.bincount(fine_group, weights=labeled, minlength=n_groups)
        .round()
        .astype(np.int64),
        "unlabeled": np.bincount(fine_group, weights=weight, minlength=n_groups),
        "unlabeled_square": np.bincount(
            fine_group, weights=weight * expected[pair_row], minlength=n_groups
        ),
        "confidence_counts": np.bincount(
            fine_group * n_bins + confidence_bin[pair_row], minlength=n_groups * n_bins
        )
        .reshape(n_groups, n_bins)
        .astype(np.float64)
        if new
        else np.zeros((n_groups, n_bins)),
    }
    stats = np.zeros((n_groups, layout_of(contract).size))
    has_stats = columns["n_labeled"] > 0
    if labeled.any():
        rows = pair_row[labeled]
        stats = np.hstack(
            [
                pack_groups(
                    grouped_stats(
                        contract.spec.task,
                        inputs[rows],
                        labels[rows],
                        contract.edges,
                        fine_group[labeled],
                        n_groups,
                        calibrator=contract.calibrator,
                        threshold=contract.threshold,
                    )
                ),
                _knot_sums(contract, inputs[rows], labels[rows], fine_group[labeled], n_groups),
            ]
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
                unlabeled_expected_square=float(cols["unlabeled_square"][i]),
                confidence_counts=cols["confidence_counts"][i] if new else None,
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
        mine.unlabeled_expected_square += delta.unlabeled_expected_square
        mine.confidence_counts = _add(mine.confidence_counts, delta.confidence_counts)
        mine.stats = _add(mine.stats, delta.stats)
    return into


def _add(mine: np.ndarray | None, other: np.ndarray | None) -> np.ndarray | None:
    if other is None:
        return mine
    return other.copy() if mine is None else mine + other


def parsed_slices(texts: list[str]) -> list[list[str]]:
    """Decode stored slice lists, once per distinct list."""
    cache: dict[str, list[str]] = {}
    return [cache[t] if t in cache else cache.setdefault(t, json.loads(t)) for t in texts]


def stored_inputs(contract: Contract, blobs: list[bytes]) -> np.ndarray:
    """Stored float64 inputs as (N, K) logits (multiclass) or (N,) scores (binary)."""
    flat = np.frombuffer(b"".join(blobs), dtype="<f8")
    if contract.spec.task == "multiclass":
        return flat.reshape(len(blobs), len(contract.spec.classes))
    return flat
