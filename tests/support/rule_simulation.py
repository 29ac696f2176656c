"""The status rule driven over simulated streams: its error rates per evaluation and over time.

A cohort labels ``BLOCK_ROWS`` predictions per 5-minute bucket (300 an hour), drawn from a
``simulation.RowPool``; its trailing windows (``WINDOWS``) are re-decided once per bucket, as
``service.stream.monitoring.calibration_reading`` reads a window: the window's whole hours as
hour blocks and the 5-minute buckets at its ragged ends (``service.stream.windows.Window``),
after 24 hours of lookback tiled the same way, run through the detectors of ``sequential`` and
the status rule of ``drift``. ``ServiceStream`` computes every block's e-value once and
assembles each refresh's window from them, so weeks of refreshes take seconds;
tests/integration/test_detector_tiling.py checks it against the service's own readings on a
simulated clock. ``bench/bench_statistics.py`` runs these at full size; the tests run seeded
small versions.
"""

from __future__ import annotations

import math

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.drift import DriftPolicy, StatusLevels, decide_statuses
from service.calibration.ece_inference import infer_ece_many
from service.calibration.sequential import (
    LOOKBACK_ROWS,
    BinTables,
    DetectorDesign,
    PatternSums,
    block_increments,
)
from service.calibration.vocabulary import Status, Task
from tests.support.simulation import RowPool, trailing_values

BLOCK_ROWS = 25
BLOCKS_PER_WEEK = 2016
#: 5-minute buckets per hour bucket, and in the lookback read before a window (24 hours).
HOUR_BUCKETS = 12
LOOKBACK_BUCKETS = 288
#: The default windows: the 5-minute buckets each reads at a refresh, its duration plus the
#: bucket holding ``now`` (``Window.trailing``).
WINDOWS = {"1h": 13, "24h": 289, "7d": 2017}


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


class ServiceStream:
    """A cohort's stream of 5-minute buckets (``BLOCK_ROWS`` labeled rows each, the first at an
    hour boundary) as the service's detectors read it at every refresh.

    Every block a window can be tiled with is a 5-minute bucket or an hour bucket. Its
    variance bound and learned signs come from the rows before it back to the block boundary
    at least ``LOOKBACK_ROWS`` rows earlier: with ``BLOCK_ROWS`` rows per bucket that is two
    hours before, inside an hour block for every bucket of a window of an hour or more (the
    lookback read is 24 hours), so from the start of the hour two hours before the block's
    hour. So each bucket's and each hour's e-values are computed once, and a refresh's value
    is the CUSUM over its window's blocks, started at the window's first block.
    """

    def __init__(self, tables: BinTables) -> None:
        if LOOKBACK_ROWS % (BLOCK_ROWS * HOUR_BUCKETS):
            raise ValueError("the lookback must span whole hours of buckets")
        self.tables = tables
        n, c, k = (
            np.asarray(x, dtype=np.float64)
            for x in (tables.counts, tables.confidence_sums, tables.successes)
        )
        self.T = n.shape[0]
        self.prefix = [
            np.concatenate([np.zeros((1, n.shape[1])), np.cumsum(x, axis=0)]) for x in (n, c, k)
        ]
        back = LOOKBACK_ROWS // BLOCK_ROWS
        fine = np.arange(self.T)
        hours = np.arange(0, self.T - HOUR_BUCKETS + 1, HOUR_BUCKETS)
        starts = np.concatenate([fine, hours])
        ends = np.concatenate([fine + 1, hours + HOUR_BUCKETS])
        region = np.maximum((starts // HOUR_BUCKETS) * HOUR_BUCKETS - back, 0)
        self.sums = PatternSums.of_blocks(
            self._between(starts, ends),
            self._between(region, starts),
            tables.edges,
            tables.confidence_view,
        )
        self.hours = hours.size

    def _between(self, a: np.ndarray, b: np.ndarray) -> tuple[FloatArray, FloatArray, FloatArray]:
        n, c, k = (p[b] - p[a] for p in self.prefix)
        return n, c, k

    def blocks(self, end: int, buckets: int) -> list[tuple[int, int]]:
        """The bucket ranges ``[a, b)`` of the blocks tiling the window of ``buckets`` buckets
        ending with bucket ``end``, in time order (``Window.tiling``)."""
        lo, hi = end + 1 - buckets, end + 1
        first = -(-lo // HOUR_BUCKETS) * HOUR_BUCKETS
        last = (hi // HOUR_BUCKETS) * HOUR_BUCKETS
        if first >= last:
            return [(i, i + 1) for i in range(lo, hi)]
        return (
            [(i, i + 1) for i in range(lo, first)]
            + [(h, h + HOUR_BUCKETS) for h in range(first, last, HOUR_BUCKETS)]
            + [(i, i + 1) for i in range(last, hi)]
        )

    def values(self, ends: np.ndarray, buckets: int, design: DetectorDesign) -> FloatArray:
        """(R,) the detector's value (max over patterns) at the refreshes after buckets ``ends``
        of the window of ``buckets`` buckets (blocks before the stream's first bucket are
        absent, as buckets never written are)."""
        Z = self.sums.increments(design)
        Z = np.concatenate([Z, np.zeros((Z.shape[0], 1))], axis=1)
        absent = Z.shape[1] - 1
        ends = np.asarray(ends, dtype=np.int64)
        out = np.zeros(ends.size)
        for phase in np.unique((ends + 1) % HOUR_BUCKETS):
            pick = np.flatnonzero((ends + 1) % HOUR_BUCKETS == phase)
            layout = self.blocks(int(ends[pick[0]]), buckets)
            shift = (ends[pick] - ends[pick[0]])[:, None]
            start = np.array([a for a, _ in layout])[None, :] + shift
            hour = np.array([b - a == HOUR_BUCKETS for a, b in layout])[None, :]
            column = np.where(hour, self.T + start // HOUR_BUCKETS, start)
            paths = np.cumsum(Z[:, np.where(start < 0, absent, column)], axis=2)
            lowest = np.minimum(paths.min(axis=2), 0.0)
            out[pick] = (paths[:, :, -1] - lowest).max(axis=0)
        return out

    def window_sums(
        self, ends: np.ndarray, buckets: int
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(R, M) counts, confidence sums and successes of each refresh's window."""
        ends = np.asarray(ends, dtype=np.int64)
        return self._between(ends + 1 - buckets, ends + 1)


def service_stream(pool: RowPool, n: FloatArray, c: FloatArray, k: FloatArray) -> ServiceStream:
    """A pool's buckets as the service's detectors read them."""
    return ServiceStream(views_of(pool, n, c, k))


def steady_onsets(
    pool: RowPool,
    levels: StatusLevels,
    rng: np.random.Generator,
    weeks: int,
    policy: DriftPolicy | None = None,
) -> dict[str, int]:
    """Onsets per window over ``weeks`` weeks of a steady cohort (after a week of warm-up,
    refreshed once per bucket): of ``alert`` and ``warn`` detections, and with ``policy`` of
    ``status`` (a refresh whose status is ``warn`` or ``alert`` and more severe than the
    previous refresh's): ``{"alert:1h": count, ..., "warn:7d": count, "status:1h": ...}``."""
    warm = BLOCKS_PER_WEEK + LOOKBACK_BUCKETS + HOUR_BUCKETS
    stream = service_stream(pool, *pool.tables(rng, warm + weeks * BLOCKS_PER_WEEK, BLOCK_ROWS))
    ends = np.arange(warm, stream.T)
    out = {}
    values: dict[tuple[str, str], FloatArray] = {}
    for kind, design in (("alert", levels.alert_design), ("warn", levels.warn_design)):
        for window, size in WINDOWS.items():
            values[kind, window] = stream.values(ends, size, design)
            out[f"{kind}:{window}"] = onsets(values[kind, window] >= design.threshold)
    if policy is not None:
        for window, size in WINDOWS.items():
            n = stream.window_sums(ends, size)[0].sum(axis=1).astype(np.int64)
            # The "cannot tell" rule only tells insufficient_data from ok, neither of which
            # is an onset, so the windows' intervals are not needed.
            status = decide_statuses(
                n, np.zeros(n.size), values["alert", window], values["warn", window], levels, policy
            )
            out[f"status:{window}"] = status_onsets(status)
    return out


def onsets(on: np.ndarray) -> int:
    """Times a (R,) boolean series turns on (its first element counts when on)."""
    return int(on[0] + (on[1:] & ~on[:-1]).sum()) if on.size else 0


def status_onsets(status: np.ndarray) -> int:
    """Refreshes whose status is ``warn`` or ``alert`` and more severe than the one before
    (the first refresh counts when it is)."""
    rank = np.select([status == Status.ALERT, status == Status.WARN], [2, 1], default=0)
    rose = np.concatenate([[True], rank[1:] > rank[:-1]])
    return int(((rank > 0) & rose).sum())


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
    from ``before`` for ``calm_blocks`` buckets after 24 hours of lookback, then from
    ``after``, refreshed once per bucket; -1 when none alerts within ``horizon_blocks``
    buckets of the change. The stream starts at an hour boundary; the change falls at
    ``calm_blocks`` buckets after the lookback."""
    found = np.full(reps, -1)
    lead = LOOKBACK_BUCKETS + calm_blocks
    design = levels.alert_design
    for r in range(reps):
        parts = [
            before.tables(rng, lead, BLOCK_ROWS),
            after.tables(rng, horizon_blocks, BLOCK_ROWS),
        ]
        n, c, k = (np.vstack([p[i] for p in parts]) for i in range(3))
        stream = service_stream(before, n, c, k)
        ends = np.arange(lead, lead + horizon_blocks)
        hits = np.concatenate(
            [
                np.flatnonzero(stream.values(ends, size, design) >= design.threshold)
                for size in WINDOWS.values()
            ]
        )
        first = int(hits.min()) if hits.size else None
        if first is not None:
            found[r] = (first + 1) * BLOCK_ROWS
    return found


#: Labels a year at 300 an hour: the mean time to a false alarm the oracle is tuned to.
YEAR_OF_LABELS = 300 * 24 * 365
_EDGE = 1e-12


class Oracle:
    """The CUSUM of a rule that knows the populations before and after the change.

    After the change every row's success probability is ``q``, the changed scenario's; the rule
    tests it against ``p0 = c + null_share (q - c)`` for the same rows (``c`` the confidence).
    Each labeled row adds its log-likelihood ratio ``y ln(q / p0) + (1 - y) ln((1 - q) / (1 -
    p0))``; it alarms when the CUSUM reaches ``threshold``, set for a mean time to a false alarm
    on rows drawn from ``p0``. By Lorden's and Moustakides' optimality of this CUSUM, no rule
    whose mean time to a false alarm on rows from ``p0`` is as long detects the change sooner
    (in worst-case expected delay).

    ``null_share = 0``: ``p0 = c``, a calibrated cohort, the population before the change.
    ``0 < null_share < 1``: every gap scaled by ``null_share``, signs kept, so the binned ECE is
    ``null_share`` times the changed one: at the status rule's alert level, a cohort the rule
    must not alert on, so its delay bounds that of every rule that keeps as long between false
    alerts there. Rows are drawn from ``after``'s pool,
    outcomes afresh (``RowPool``).
    """

    def __init__(
        self, after: RowPool, threshold: float = float("inf"), null_share: float = 0.0
    ) -> None:
        self.pool = after
        c = np.clip(after.confidence, _EDGE, 1.0 - _EDGE)
        q = np.clip(after.success, _EDGE, 1.0 - _EDGE)
        p0 = c + null_share * (q - c)
        self.c = c
        self.q = q
        self.p0 = p0
        self.hit = np.log(q / p0)
        self.miss = np.log((1.0 - q) / (1.0 - p0))
        self.threshold = threshold

    @classmethod
    def at_level(cls, after: RowPool, level: float) -> Oracle:
        """The oracle whose null is ``after``'s rows at true ECE ``level`` (its gaps scaled by
        ``level`` over its ECE)."""
        return cls(after, null_share=level / after.scenario.true_ece)

    def llr(self, rng: np.random.Generator, rows: int, success: FloatArray) -> FloatArray:
        """(rows,) log-likelihood ratios of rows whose outcomes succeed with ``success`` (one of
        ``c``, ``p0`` or ``q``, per pool row)."""
        pick = rng.integers(0, self.c.size, size=rows)
        return np.where(rng.random(rows) < success[pick], self.hit[pick], self.miss[pick])

    def run_lengths(self, rng: np.random.Generator, threshold: float, alarms: int) -> FloatArray:
        """(alarms,) rows between false alarms of the CUSUM at ``threshold`` on rows from
        ``p0`` (restarted at 0 after each alarm)."""
        found: list[float] = []
        since, state, chunk = 0, 0.0, 1 << 16
        z = self.llr(rng, chunk, self.p0)
        while len(found) < alarms:
            if z.size == 0:
                z = self.llr(rng, chunk, self.p0)
            path = np.cumsum(z)
            values = path - np.minimum(np.minimum.accumulate(path), -state)
            over = np.flatnonzero(values >= threshold)
            if over.size == 0:
                since += z.size
                state = float(values[-1])
                z = z[:0]
                continue
            t = int(over[0])
            found.append(since + t + 1)
            since, state, z = 0, 0.0, z[t + 1 :]
        return np.array(found, dtype=np.float64)

    def tune(self, rng: np.random.Generator, target: float = YEAR_OF_LABELS) -> float:
        """The threshold whose mean rows to a false alarm is ``target``: the mean run length
        is measured at two lower thresholds (about 3,000 and 20,000 rows, 200 alarms each) and
        extrapolated on ``ln ARL = a + b h``, the CUSUM's exponential law."""
        low = 6.0
        arl_low = float(self.run_lengths(rng, low, 200).mean())
        high = low + 2.0
        arl_high = float(self.run_lengths(rng, high, 200).mean())
        slope = (math.log(arl_high) - math.log(arl_low)) / (high - low)
        self.threshold = high + (math.log(target) - math.log(arl_high)) / slope
        return self.threshold

    def delays(
        self, rng: np.random.Generator, reps: int, calm_rows: int, horizon_rows: int
    ) -> FloatArray:
        """(reps,) labels after the change until the CUSUM alarms (a calibrated cohort for
        ``calm_rows`` rows first, as in ``labels_to_alert``); -1 when it does not within
        ``horizon_rows``, or alarmed before the change."""
        out = np.full(reps, -1.0)
        for r in range(reps):
            z = np.concatenate(
                [self.llr(rng, calm_rows, self.c), self.llr(rng, horizon_rows, self.q)]
            )
            path = np.cumsum(z)
            values = path - np.minimum(np.minimum.accumulate(path), 0.0)
            over = np.flatnonzero(values >= self.threshold)
            if over.size and over[0] >= calm_rows:
                out[r] = over[0] - calm_rows + 1
        return out
