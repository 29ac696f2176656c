"""The status rule driven over simulated streams: its error rates per evaluation and over time.

A cohort labels ``BLOCK_ROWS`` predictions per 5-minute bucket (300 an hour), drawn from a
``simulation.RowPool``; its trailing windows (``WINDOWS``, in buckets) are re-decided at every
bucket, exactly as the refresher decides a stored window: the detectors of ``sequential`` over
the window's buckets, with ``sequential.LOOKBACK_ROWS`` rows before it, and the status rule of
``drift``. The clock is simulated: weeks of buckets take seconds. ``bench/bench_statistics.py``
runs these at full size; the tests run seeded small versions.
"""

from __future__ import annotations

import math

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.drift import DriftPolicy, StatusLevels, decide_statuses
from service.calibration.ece_inference import infer_ece_many
from service.calibration.sequential import LOOKBACK_ROWS, BinTables, block_increments
from service.calibration.vocabulary import Task
from tests.support.simulation import RowPool, trailing_values

BLOCK_ROWS = 25
BLOCKS_PER_WEEK = 2016
#: The default windows, in 5-minute buckets.
WINDOWS = {"1h": 12, "24h": 288, "7d": 2016}


def views_of(pool: RowPool, n: FloatArray, c: FloatArray, k: FloatArray) -> BinTables:
    """Blocks of a pool's scenario as the detectors read them."""
    population = pool.scenario.population
    binary = population.task == Task.BINARY
    name = "positive" if binary else "top-label"
    return BinTables(n, c, k, population.edge_array, binary, name)


def baseline_levels(
    pool: RowPool, rng: np.random.Generator, rows: int, count: int, policy: DriftPolicy
) -> list[StatusLevels]:
    """The status levels of ``count`` baselines of ``rows`` rows each drawn from ``pool``."""
    inferred = infer_ece_many(*pool.tables(rng, count, rows))
    return [StatusLevels.of(policy, inferred[i]) for i in range(count)]


def window_statuses(
    pool: RowPool,
    levels: list[StatusLevels],
    rng: np.random.Generator,
    rows: int,
    policy: DriftPolicy,
) -> np.ndarray:
    """Statuses of ``len(levels)`` windows of ``rows`` labeled rows of a steady cohort (each
    after ``LOOKBACK_ROWS`` rows), each judged with its own baseline's levels."""
    reps = len(levels)
    lookback = LOOKBACK_ROWS // BLOCK_ROWS
    blocks = lookback + math.ceil(rows / BLOCK_ROWS)
    flat = pool.tables(rng, reps * blocks, BLOCK_ROWS)
    n, c, k = (x.reshape(reps, blocks, pool.M) for x in flat)
    inside = slice(lookback, blocks)
    upper = infer_ece_many(n[:, inside].sum(1), c[:, inside].sum(1), k[:, inside].sum(1)).upper
    labeled = n[:, inside].sum(axis=(1, 2)).astype(np.int64)
    status = np.empty(reps, dtype=object)
    for r in range(reps):
        tables = views_of(pool, n[r], c[r], k[r])
        ends = []
        for design in (levels[r].alert_design, levels[r].warn_design):
            increments = block_increments(tables, design)[0][:, lookback:]
            ends.append(trailing_values(increments, increments.shape[1])[-1:])
        status[r] = decide_statuses(
            labeled[r : r + 1], upper[r : r + 1], ends[0], ends[1], levels[r], policy
        )[0]
    return status


def steady_onsets(
    pool: RowPool, levels: StatusLevels, rng: np.random.Generator, weeks: int
) -> dict[str, int]:
    """Onsets of ``alert`` and ``warn`` detections per window over ``weeks`` weeks of a steady
    cohort (after a week of warm-up): ``{"alert:1h": count, ..., "warn:7d": count}``."""
    warm = BLOCKS_PER_WEEK
    n, c, k = pool.tables(rng, warm + weeks * BLOCKS_PER_WEEK, BLOCK_ROWS)
    tables = views_of(pool, n, c, k)
    out = {}
    for kind, design in (("alert", levels.alert_design), ("warn", levels.warn_design)):
        increments = block_increments(tables, design)[0]
        for window, size in WINDOWS.items():
            on = trailing_values(increments, size)[warm:] >= design.threshold
            out[f"{kind}:{window}"] = int(on[0] + (on[1:] & ~on[:-1]).sum())
    return out


def labels_to_alert(
    before: RowPool,
    after: RowPool,
    levels: StatusLevels,
    rng: np.random.Generator,
    reps: int,
    calm_blocks: int = 288,
    horizon_blocks: int = 1200,
) -> np.ndarray:
    """Labels of a changed cohort until its first alert in any window: ``reps`` cohorts drawn
    from ``before`` for ``calm_blocks`` buckets, then from ``after``; -1 when none alerts within
    ``horizon_blocks`` buckets of the change."""
    found = np.full(reps, -1)
    for r in range(reps):
        parts = [
            before.tables(rng, calm_blocks, BLOCK_ROWS),
            after.tables(rng, horizon_blocks, BLOCK_ROWS),
        ]
        n, c, k = (np.vstack([p[i] for p in parts]) for i in range(3))
        increments = block_increments(views_of(before, n, c, k), levels.alert_design)[0]
        first = min(
            (
                int(hits[0])
                for size in WINDOWS.values()
                if (
                    hits := np.flatnonzero(
                        trailing_values(increments, size)[calm_blocks:]
                        >= levels.alert_design.threshold
                    )
                ).size
            ),
            default=None,
        )
        if first is not None:
            found[r] = (first + 1) * BLOCK_ROWS
    return found
