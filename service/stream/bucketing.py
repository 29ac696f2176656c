"""Turn a batch of predictions (and labels) into additions to time buckets per slice."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from service.calibration import (
    IdentityCalibrator,
    binary_probabilities,
    multiclass_probabilities,
)
from service.calibration._checks import logit_matrix
from service.calibration.binning import bin_index, is_equal_width
from service.calibration.calibrators import binary_log_odds, calibrated_logits
from service.calibration.grouping import group_sums
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    VectorCalibrator,
)
from service.calibration.packing import (
    CLASSWISE_MAX_CELLS,
    StatsLayout,
    keeps_classwise,
    pack_groups,
)
from service.calibration.refit import grouped_knot_sums
from service.calibration.stats import grouped_stats
from service.calibration.vocabulary import Task
from service.contracts.model import Contract
from service.stream.bucket_store import BucketDelta, BucketKey
from service.stream.windows import FINE, HOUR, RESOLUTION_FINE, RESOLUTION_HOUR

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MULTICLASS_FAMILIES = (VectorCalibrator, MatrixCalibrator, IsotonicOvRCalibrator)


def layout_of(contract: Contract) -> StatsLayout:
    """The shape of a contract's bucket statistics: class-wise tables only for a multiclass
    contract of at most ``CLASSWISE_MAX_CELLS`` classes times bins (``keeps_classwise``)."""
    spec = contract.spec
    return StatsLayout(
        task=spec.task,
        edges=spec.bin_edges,
        n_classes=len(spec.classes),
        classwise=keeps_classwise(spec.task, len(spec.classes), len(spec.bin_edges) - 1),
        threshold=contract.threshold,
        refit=True,
    )


def classwise_note(contract: Contract) -> str | None:
    """What a reader of a window measured against ``contract`` should know about its class-wise
    reliability: a note when the contract's buckets keep no class-wise tables, else None."""
    spec = contract.spec
    classes, bins = len(spec.classes), len(spec.bin_edges) - 1
    if spec.task != Task.MULTICLASS or keeps_classwise(spec.task, classes, bins):
        return None
    return (
        f"class-wise reliability is kept when classes times bins come to at most"
        f" {CLASSWISE_MAX_CELLS:,}; this contract has {classes:,} x {bins} = {classes * bins:,},"
        " so classwise_ece is null"
    )


def confidence_and_expected_correctness(
    contract: Contract, inputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the confidence the reliability bins use and the probability the row is right.

    Multiclass: both are the top-label confidence. Binary: the confidence is ``p``; the row is
    right with probability ``p`` when predicted positive (``p >= tau``), else ``1 - p``.
    """
    if contract.spec.task == Task.MULTICLASS:
        top = multiclass_probabilities(contract.calibrator, inputs).max(axis=1)
        return top, top
    p = binary_probabilities(contract.calibrator, inputs)
    return p, np.where(p >= contract.threshold, p, 1.0 - p)


def _knot_sums(
    contract: Contract, inputs: np.ndarray, labels: np.ndarray, group: np.ndarray, n_groups: int
) -> np.ndarray:
    """The (G, 3 J) refit-temperature knot sums of labeled rows per group (see ``refit``)."""
    calibrator = contract.calibrator
    if contract.spec.task == Task.MULTICLASS:
        z, temperature = calibrated_logits(calibrator, logit_matrix(inputs))
        sums = grouped_knot_sums(
            Task.MULTICLASS, z, labels, group, n_groups, temperature=temperature
        )
    else:
        log_odds = binary_log_odds(calibrator, np.asarray(inputs, dtype=np.float64))
        sums = grouped_knot_sums(Task.BINARY, log_odds, labels, group, n_groups)
    return sums.reshape(n_groups, -1)


def epoch_seconds(ts: Sequence[datetime]) -> np.ndarray:
    """Whole seconds since the epoch (floor), exactly, as int64."""
    second = timedelta(seconds=1)
    return np.array([(t - _EPOCH) // second for t in ts], dtype=np.int64)


#: Group keys pack ``high << _KEY_SHIFT | low`` (a slice list or slice above a 5-minute or hour
#: index since the epoch); 5-minute indices stay below 2**33 until the year 83,000.
_KEY_SHIFT = 33
_LOW = (1 << _KEY_SHIFT) - 1

#: The scalar columns of ``_group_columns``, in order, before the confidence counts and stats.
_COLUMNS = ("n_predictions", "n_labeled", "unlabeled", "unlabeled_square")


def _slice_combos(slices: Sequence[Sequence[str]]) -> tuple[list[str], list[list[int]], np.ndarray]:
    """Distinct slice lists of the rows: ``(slice names, slice ids of each combination, (N,)
    combination of each row)``."""
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
    return list(names), combo_slices, combo_of_row


def _sum_by(
    keys: np.ndarray, values: np.ndarray, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sum rows of (R, C) ``values`` by (P,) int64 ``keys``: entry p adds row ``rows[p]`` (row
    p without ``rows``) into the sum of ``keys[p]``. Returns ``(distinct keys ascending, (D, C)
    sums)``, each summed in the order of p (``group_sums``)."""
    distinct, target = np.unique(keys, return_inverse=True)
    return distinct, group_sums(values, target, distinct.size, rows)


def _calibrated_once(contract: Contract, inputs: np.ndarray) -> tuple[Contract, np.ndarray]:
    """A multiclass family's calibrated logits, computed once for the batch, with a stand-in
    contract whose identity calibrator reads them as they are; any other contract unchanged."""
    calibrator = contract.calibrator
    if contract.spec.task != Task.MULTICLASS or not isinstance(calibrator, MULTICLASS_FAMILIES):
        return contract, inputs
    z, _ = calibrated_logits(calibrator, logit_matrix(inputs))
    spec = dataclasses.replace(contract.spec, calibrator=IdentityCalibrator())
    return dataclasses.replace(contract, spec=spec), z


def _group_columns(
    contract: Contract,
    inputs: np.ndarray,
    labels: np.ndarray,
    group: np.ndarray,
    n_groups: int,
    new: bool,
) -> np.ndarray:
    """The (G, C) additive columns of each row group, laid out as ``_COLUMNS`` then the
    confidence counts (M) then the packed statistics (``layout_of``)."""
    contract, inputs = _calibrated_once(contract, inputs)
    confidence, expected = confidence_and_expected_correctness(contract, inputs)
    labeled = labels >= 0
    moved = np.where(labeled, 0.0, 1.0) if new else np.where(labeled, -1.0, 0.0)
    weight = moved * expected
    n_bins = contract.edges.size - 1
    layout = layout_of(contract)
    out = np.zeros((n_groups, len(_COLUMNS) + n_bins + layout.size))
    if new:
        out[:, 0] = np.bincount(group, minlength=n_groups)
        confidence_bin = bin_index(confidence, contract.edges, is_equal_width(contract.edges))
        out[:, len(_COLUMNS) : len(_COLUMNS) + n_bins] = np.bincount(
            group * n_bins + confidence_bin, minlength=n_groups * n_bins
        ).reshape(n_groups, n_bins)
    out[:, 1] = np.bincount(group, weights=labeled, minlength=n_groups)
    out[:, 2] = np.bincount(group, weights=weight, minlength=n_groups)
    out[:, 3] = np.bincount(group, weights=weight * expected, minlength=n_groups)
    if labeled.any():
        rows = np.flatnonzero(labeled)
        out[:, len(_COLUMNS) + n_bins :] = np.hstack(
            [
                pack_groups(
                    grouped_stats(
                        contract.spec.task,
                        inputs[rows],
                        labels[rows],
                        contract.edges,
                        group[rows],
                        n_groups,
                        calibrator=contract.calibrator,
                        threshold=contract.threshold,
                        classwise=layout.classwise,
                    )
                ),
                _knot_sums(contract, inputs[rows], labels[rows], group[rows], n_groups),
            ]
        )
    return out


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
    and their expected correctness moves out of the unlabeled sum.

    Every row is evaluated once: the rows are grouped by (slice list, 5-minute bucket) and the
    statistics of each group come from one grouped pass; each group's sums are then added into
    the 5-minute bucket of each of its slices, and those into their hour buckets.
    """
    if len(seconds) == 0:
        return {}
    fine = np.asarray(seconds, dtype=np.int64) // int(FINE.total_seconds())
    names, combo_slices, combo_of_row = _slice_combos(slices)
    group_keys, row_group = np.unique((combo_of_row << _KEY_SHIFT) | fine, return_inverse=True)
    columns = _group_columns(
        contract, inputs, np.asarray(labels), row_group.ravel(), group_keys.size, new
    )
    group_combo = group_keys >> _KEY_SHIFT
    group_fine = group_keys & _LOW
    sources, slice_ids = [], []
    for combo, ids in enumerate(combo_slices):
        groups = np.flatnonzero(group_combo == combo)
        for sid in ids:
            sources.append(groups)
            slice_ids.append(np.full(groups.size, sid, dtype=np.int64))
    source = np.concatenate(sources)
    slice_of = np.concatenate(slice_ids)
    fine_keys, fine_sums = _sum_by(
        (slice_of << _KEY_SHIFT) | group_fine[source], columns, rows=source
    )
    per_hour = HOUR // FINE
    hour_keys, hour_sums = _sum_by(
        (fine_keys & ~_LOW) | ((fine_keys & _LOW) // per_hour), fine_sums
    )
    stats_start = len(_COLUMNS) + contract.edges.size - 1
    deltas: dict[BucketKey, BucketDelta] = {}
    for keys, sums, resolution, step in (
        (fine_keys, fine_sums, RESOLUTION_FINE, FINE),
        (hour_keys, hour_sums, RESOLUTION_HOUR, HOUR),
    ):
        counts = np.rint(sums[:, :2]).astype(np.int64).tolist()
        unlabeled = sums[:, 2:4].tolist()
        for i, key in enumerate(keys.tolist()):
            n_predictions, n_labeled = counts[i]
            index = key & _LOW
            deltas[(names[key >> _KEY_SHIFT], resolution, _EPOCH + index * step, contract.id)] = (
                BucketDelta(
                    n_predictions=n_predictions,
                    n_labeled=n_labeled,
                    unlabeled_expected_correct=unlabeled[i][0],
                    unlabeled_expected_square=unlabeled[i][1],
                    confidence_counts=sums[i, len(_COLUMNS) : stats_start] if new else None,
                    stats=sums[i, stats_start:] if n_labeled > 0 else None,
                )
            )
    return deltas


def merge_deltas(
    into: dict[BucketKey, BucketDelta], other: dict[BucketKey, BucketDelta]
) -> dict[BucketKey, BucketDelta]:
    """Add ``other`` into ``into`` key by key (returns ``into``); ``other`` is consumed: its
    deltas may be taken over as they are, so the caller must not use it afterwards."""
    if not into:
        into.update(other)
        return into
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
    if contract.spec.task == Task.MULTICLASS:
        return flat.reshape(len(blobs), len(contract.spec.classes))
    return flat


def shares_bucket(groups: Sequence[str], seconds: np.ndarray, at_least: int = 2) -> np.ndarray:
    """(N,) bool: whether each row's 5-minute bucket holds at least ``at_least`` rows of its
    group, itself included (``groups`` are opaque keys, e.g. contract and slice list;
    ``seconds`` event times in whole seconds since the epoch). A row alone in its bucket would
    rewrite that bucket's rows (5-minute and hour, per slice) for itself."""
    if len(groups) == 0:
        return np.zeros(0, dtype=bool)
    _, group = np.unique(np.asarray(groups, dtype=object), return_inverse=True)
    fine = np.asarray(seconds, dtype=np.int64) // int(FINE.total_seconds())
    keys = (group.ravel().astype(np.int64) << _KEY_SHIFT) | fine
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return np.asarray(counts[inverse.ravel()] >= at_least)
