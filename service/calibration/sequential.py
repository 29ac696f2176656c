"""A sequential test of "the ECE exceeds a level", run over a window's buckets in time order.

A drift status is re-decided at every refresh, so a fixed-level test would raise a false alarm
every few dozen refreshes. This module's rule keeps its false-alarm rate over time instead: a
CUSUM of e-values (an *e-detector*), whose mean time to a false alarm is at least ``e^h``
blocks whatever the data (Ville's inequality), and in practice far longer.

**The statistic.** For a pattern of weights ``w_m`` in [-1, 1] over the bins, each row
contributes ``x = w_m (c - y)`` (its bin's weight times confidence minus success). Its mean,
``sum_m pi_m w_m delta_m``, is at most the true ECE ``sum_m pi_m |delta_m|`` for any such
weights, and equals it when the weights are the signs of the gaps. So "the ECE is at most mu0"
implies "every pattern's mean is at most mu0", and a test of the latter never alarms more often
than its level allows when the former holds, whatever the configuration of gaps.

**The e-values.** A block of N rows whose pattern sum is X contributes
``Z = lambda (X - mu0 N) - (e^lambda - 1 - lambda) v N``: by Bennett's inequality (``x - mu0 <=
1``, per-row variance at most ``v``) ``E exp(Z) <= 1`` under the null, so the CUSUM
``S_b = max(0, S_(b-1) + Z_b)`` is an e-detector. ``lambda = ln(1 + (mu1 - mu0) / v)`` maximises
the growth of S when the mean is ``mu1``, the shift the detector is tuned for. Each pattern's
``v`` (``sum_m pi_m w_m^2 p_m (1 - p_m)``) and the learned patterns' weights come from the rows
just before each block (at least ``LOOKBACK_ROWS``, or all there are), never from the block
itself, so each Z is an e-value given the past.

**Patterns.** Over-prediction (every sign +1) and under-prediction (-1) catch gaps of one sign;
for a positive-class view (binary, or class 1 of a two-class model) over- and under-confidence
(signs flip at 0.5) catch a temperature misfit; the *learned* pattern takes each bin's sign
from the gaps of the preceding rows and catches any other configuration. The *learned-weights*
pattern weighs each bin by its preceding gap over its variance (the direction of the likelihood
ratio of a small shift), shrunk toward 0 by ``n / (n + SHRINK_ROWS)`` and scaled so the largest
weight is 1: bins without error weigh little, so an error confined to a few bins is not diluted
by the noise of the others. The status uses the largest S over the patterns.

**Windows.** The detector starts at 0 at the window's first block and reads its blocks (the
buckets the window is tiled with: hours, 5-minute buckets at its ragged ends) in order; its value
is S after the last block: the strongest evidence of the window's most recent stretch. A window
therefore alarms only on its own predictions, and its alarm clears when newer calibrated rows
outweigh the stretch, or the stretch leaves the window. The thresholds and their measured
error rates are in bench/results/statistics-tables.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.calibration._checks import FloatArray

#: The e-detectors' thresholds on ``S`` (natural log scale).
ALERT_THRESHOLD = 9.0
WARN_THRESHOLD = 5.0
#: Rows before a block that set its variance bound and the learned pattern's signs.
LOOKBACK_ROWS = 600
#: The per-row variance bound never goes below this (rows near certainty still carry noise).
MIN_VARIANCE = 0.01
#: The shift a detector is tuned for is at least this (a policy with max_ece 0 still detects).
MIN_SHIFT = 0.005
#: Rows that shrink a bin's learned weight toward 0: ``n / (n + SHRINK_ROWS)`` of its gap.
SHRINK_ROWS = 30.0

OVER_PREDICTION = "over-prediction"
UNDER_PREDICTION = "under-prediction"
OVER_CONFIDENCE = "over-confidence"
UNDER_CONFIDENCE = "under-confidence"
LEARNED = "learned"
LEARNED_WEIGHTS = "learned-weights"


@dataclass(frozen=True)
class BinTables:
    """Per-block reliability tables in time order: (B, M) counts, confidence sums, successes.

    ``edges`` are the bins' (M + 1,) edges; ``confidence_view`` says whether over- and
    under-confidence patterns apply (a positive-class view: binary scores, or class 1 of a
    two-class model), ``name`` what the view is called in reasons (``top-label``, ``positive``).
    """

    counts: FloatArray
    confidence_sums: FloatArray
    successes: FloatArray
    edges: FloatArray
    confidence_view: bool
    name: str

    def __post_init__(self) -> None:
        shape = np.shape(self.counts)
        if len(shape) != 2 or np.shape(self.confidence_sums) != shape:
            raise ValueError("counts, confidence_sums and successes must be (B, M) arrays")
        if np.shape(self.successes) != shape or len(self.edges) != shape[1] + 1:
            raise ValueError("successes must be (B, M) and edges (M + 1,)")

    @property
    def rows(self) -> FloatArray:
        """(B,) labeled rows per block."""
        return np.asarray(self.counts).sum(axis=1)

    @functools.cached_property
    def sums(self) -> PatternSums:
        """What every detector reads of these blocks (computed once)."""
        return PatternSums.of(self)


@dataclass(frozen=True)
class PatternSums:
    """Per block: each pattern's weighted gap sum ``X`` (P, B), the rows ``N`` (B,) and each
    pattern's per-row variance bound ``v`` (P, B) from the rows before it; and the patterns'
    names."""

    X: FloatArray
    N: FloatArray
    v: FloatArray
    names: tuple[str, ...]

    @classmethod
    def of(cls, tables: BinTables) -> PatternSums:
        n = np.asarray(tables.counts, dtype=np.float64)
        c = np.asarray(tables.confidence_sums, dtype=np.float64)
        k = np.asarray(tables.successes, dtype=np.float64)
        before = (_lookback_sums(n, n), _lookback_sums(c, n), _lookback_sums(k, n))
        return cls.of_blocks((n, c, k), before, tables.edges, tables.confidence_view)

    @classmethod
    def of_blocks(
        cls,
        blocks: tuple[FloatArray, FloatArray, FloatArray],
        before: tuple[FloatArray, FloatArray, FloatArray],
        edges: FloatArray,
        confidence_view: bool,
    ) -> PatternSums:
        """From (B, M) counts, confidence sums and successes of each block and of the rows
        before it that set its variance bound and learned signs (any B blocks, in any order)."""
        n, c, k = blocks
        ln, lc, lk = before
        g = c - k
        p = _lookback_success(ln, lc, lk)
        signs, names = _patterns(edges, confidence_view, ln, lc - lk, p, B=g.shape[0])
        return cls(
            np.einsum("pbm,bm->pb", signs, g),
            n.sum(axis=1),
            _lookback_variance(n, c, ln, p, signs),
            tuple(names),
        )

    def increments(self, design: DetectorDesign) -> FloatArray:
        """(P, B) e-value logs ``Z`` of every block and pattern under ``design``."""
        lam = np.log1p((design.alternative - design.null) / self.v)
        penalty = (np.expm1(lam) - lam) * self.v
        return lam * (self.X - design.null * self.N[None, :]) - penalty * self.N[None, :]


@dataclass(frozen=True)
class DetectorDesign:
    """An e-detector of "the ECE exceeds ``null``", tuned for a mean of ``alternative``."""

    null: float
    alternative: float
    threshold: float

    @classmethod
    def tuned(cls, null: float, alternative: float, threshold: float) -> DetectorDesign:
        """A design whose alternative lies at least ``MIN_SHIFT`` above its null."""
        null = max(float(null), 0.0)
        return cls(null, max(float(alternative), null + MIN_SHIFT), threshold)


@dataclass(frozen=True)
class Detection:
    """What a detector found at the end of a window: its value ``S`` (max over patterns and
    views), whether it reached the threshold, and the pattern, view and number of rows of the
    stretch behind the value."""

    value: float
    alarm: bool
    pattern: str | None
    view: str | None
    rows: int
    design: DetectorDesign

    def describe(self) -> str:
        """A sentence for a status reason."""
        return (
            f"the sequential test of ECE above {self.design.null:.4f} reached "
            f"{self.value:.2f} (threshold {self.design.threshold:g}) over the window's latest "
            f"{self.rows} labeled predictions ({self.pattern} pattern, {self.view} view)"
        )


def detect(views: Sequence[tuple[BinTables, int]], design: DetectorDesign) -> Detection:
    """Run ``design`` over each view's blocks and report the largest value at the end.

    Each view comes with the number of its leading blocks that are lookback only (the rows
    before the window): they inform the first window blocks' variance and signs but add no
    evidence. A view without window rows gives value 0.
    """
    best = Detection(0.0, False, None, None, 0, design)
    for tables, lookback_blocks in views:
        paths, rows, names = _paths(tables, lookback_blocks, design)
        if paths.shape[1] == 0:
            continue
        end = paths[:, -1]
        p = int(np.argmax(end))
        if end[p] > best.value:
            best = Detection(
                float(end[p]),
                bool(end[p] >= design.threshold),
                names[p],
                tables.name,
                int(rows[p]),
                design,
            )
    return best


def detection_paths(tables: BinTables, lookback_blocks: int, design: DetectorDesign) -> FloatArray:
    """(B',) the detector's value after each window block (max over patterns), B' = B minus the
    lookback blocks: a history's status path."""
    paths, _, _ = _paths(tables, lookback_blocks, design, whole_path=True)
    return paths.max(axis=0) if paths.size else np.zeros(0)


def block_increments(tables: BinTables, design: DetectorDesign) -> tuple[FloatArray, list[str]]:
    """(P, B) e-value logs ``Z`` of every block and pattern, and the patterns' names.

    Each block's variance bound and learned signs come from the rows before it in ``tables``,
    so the increments of a long stream can be cut into windows afterwards.
    """
    sums = tables.sums
    return sums.increments(design), list(sums.names)


def _paths(
    tables: BinTables, lookback_blocks: int, design: DetectorDesign, whole_path: bool = False
) -> tuple[FloatArray, np.ndarray, list[str]]:
    """CUSUM values per pattern: (P, B') paths (or their ends as (P, 1)), the rows of each
    pattern's current stretch and the pattern names."""
    Z, names = block_increments(tables, design)
    Z = Z[:, lookback_blocks:]
    rows = np.asarray(tables.rows[lookback_blocks:], dtype=float)
    after = np.concatenate([np.cumsum(rows[::-1])[::-1], [0.0]])
    P, B = Z.shape
    path = np.zeros((P, B)) if whole_path else np.zeros((P, min(B, 1)))
    stretch = np.zeros(P)
    # One pattern at a time on Python floats: the recursion is sequential in the blocks, and
    # per-block array operations over a few patterns cost more than the arithmetic. A stretch
    # starts after the last block where S was not positive (a NaN ends one too).
    for p, increments in enumerate(Z.tolist()):
        S, start = 0.0, 0
        values: list[float] | None = [] if whole_path else None
        for b, z in enumerate(increments):
            S += z
            if not S > 0.0:
                if S <= 0.0:  # not a NaN, which stays, as under np.maximum
                    S = 0.0
                start = b + 1
            if values is not None:
                values.append(S)
        stretch[p] = after[start]
        if values is not None:
            path[p] = values
        elif B:
            path[p, 0] = S
    return path, stretch.astype(np.int64), names


def _lookback_sums(values: FloatArray, n: FloatArray) -> FloatArray:
    """(B, ...) sums of ``values`` over the blocks before each block holding the last
    ``LOOKBACK_ROWS`` rows (or all earlier blocks, if fewer)."""
    rows = n.sum(axis=1)
    before = np.concatenate([[0.0], np.cumsum(rows)])
    start = np.searchsorted(before, before[:-1] - LOOKBACK_ROWS, side="right") - 1
    start = np.clip(start, 0, None)
    cumulative = np.concatenate([np.zeros((1, *values.shape[1:])), np.cumsum(values, axis=0)])
    index = np.arange(len(rows))
    return cumulative[index] - cumulative[start]


def _lookback_success(ln: FloatArray, lc: FloatArray, lk: FloatArray) -> FloatArray:
    """(B, M) per bin, the success probability between the lookback rows' mean confidence and
    success rate that lies nearest 1/2 (the largest Bernoulli variance the two admit)."""
    safe = np.where(ln > 0, ln, 1.0)
    return np.clip(0.5, np.minimum(lc, lk) / safe, np.maximum(lc, lk) / safe)


def _lookback_variance(
    n: FloatArray, c: FloatArray, ln: FloatArray, p: FloatArray, weights: FloatArray
) -> FloatArray:
    """(P, B) per-row variance bound of each pattern's ``x = w_m (c - y)`` for each block from
    the rows before it (bin counts ``ln``, success probabilities ``p``); the block's own
    confidences (``n``, ``c``) where nothing came before. Never below ``MIN_VARIANCE``."""
    seen = ln.sum(axis=1)
    before = np.einsum("pbm,bm->pb", weights**2, ln * p * (1.0 - p)) / np.where(seen > 0, seen, 1.0)
    own_rows = n.sum(axis=1)
    own_mean = np.where(n > 0, c / np.where(n > 0, n, 1.0), 0.0)
    own = (n * own_mean * (1.0 - own_mean)).sum(axis=1) / np.where(own_rows > 0, own_rows, 1.0)
    fallback = np.where(own_rows > 0, own, 0.25)
    return np.maximum(np.where(seen > 0, before, fallback[None, :]), MIN_VARIANCE)


def _patterns(
    edges: FloatArray,
    confidence_view: bool,
    ln: FloatArray,
    looked: FloatArray,
    p: FloatArray,
    B: int,
) -> tuple[FloatArray, list[str]]:
    """(P, B, M) weights in [-1, 1] per pattern and block, and the patterns' names; ``ln`` holds
    the (B, M) counts of the rows before each block, ``looked`` their gap sums and ``p`` their
    success probabilities (``_lookback_success``)."""
    M = looked.shape[1]
    fixed = [(OVER_PREDICTION, np.ones(M)), (UNDER_PREDICTION, -np.ones(M))]
    if confidence_view:
        e = np.asarray(edges, dtype=np.float64)
        side = np.where(0.5 * (e[:-1] + e[1:]) >= 0.5, 1.0, -1.0)
        fixed += [(OVER_CONFIDENCE, side), (UNDER_CONFIDENCE, -side)]
    overall = np.sign(looked.sum(axis=1, keepdims=True))
    learned = np.sign(looked)
    learned = np.where(learned == 0.0, np.where(overall == 0.0, 1.0, overall), learned)
    score = (
        looked / np.maximum(p * (1.0 - p), MIN_VARIANCE) / np.where(ln > 0, ln + SHRINK_ROWS, 1.0)
    )
    top = np.abs(score).max(axis=1, keepdims=True)
    weighted = np.where(top > 0, score / np.where(top > 0, top, 1.0), learned)
    signs = np.stack([np.broadcast_to(s, (B, M)) for _, s in fixed] + [learned, weighted])
    return signs, [name for name, _ in fixed] + [LEARNED, LEARNED_WEIGHTS]


def alert_design(level: float) -> DetectorDesign:
    """Alert: evidence that the ECE exceeds ``level``, tuned for twice that."""
    return DetectorDesign.tuned(level, 2.0 * level, ALERT_THRESHOLD)


def warn_design(level: float, alert_level: float) -> DetectorDesign:
    """Warn: evidence that the ECE exceeds ``level``, tuned for the alert level."""
    return DetectorDesign.tuned(level, alert_level, WARN_THRESHOLD)
