"""Benchmark the calibration kernels on 1,000,000 x 10 logits against a plain numpy pass.

    python bench/bench_core.py [--rows N] [--classes K] [--repeats R]

Prints a markdown table of best and median wall time over R runs and the ratio of each best
time to the plain pass (a). Target: the metric kernel (b) within 1.5x of (a).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.calibration import (
    default_edges,
    fit_temperature,
    multiclass_reading,
    multiclass_stats,
    reading_from_stats,
)

BINS = 15


def plain_pass(z: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Softmax, confidence/argmax, 15-bin ECE by bincount, NLL and Brier, written plainly."""
    N = z.shape[0]
    rows = np.arange(N)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == y
    bins = np.minimum((conf * BINS).astype(np.int64), BINS - 1)
    conf_sum = np.bincount(bins, weights=conf, minlength=BINS)
    hit_sum = np.bincount(bins, weights=correct, minlength=BINS)
    ece = float(np.abs(conf_sum - hit_sum).sum() / N)
    nll = float(-np.log(p[rows, y]).mean())
    onehot = np.zeros_like(p)
    onehot[rows, y] = 1.0
    brier = float(((p - onehot) ** 2).sum(axis=1).mean())
    return ece, nll, brier


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    rng = np.random.Generator(np.random.PCG64(20260218))
    z = rng.normal(scale=2.5, size=(args.rows, args.classes))
    y = np.where(
        rng.random(args.rows) < 0.7, z.argmax(axis=1), rng.integers(0, args.classes, args.rows)
    )
    edges = default_edges(BINS)

    cases: list[tuple[str, Callable[[], Any], int]] = [
        ("(a) plain numpy pass: softmax, argmax, ECE, NLL, Brier", lambda: plain_pass(z, y), 0),
        (
            "(b) calmon kernel: stats + reading (ECE, MCE, NLL, Brier, bins, ECE CI)",
            lambda: reading_from_stats(multiclass_stats(z, y, edges, classwise=False)),
            0,
        ),
        (
            "(c) full reading incl. classwise ECE (K x M tables) and ECE CI",
            lambda: multiclass_reading(z, y, edges),
            0,
        ),
        ("(d) fit_temperature (bounded Brent on log T)", lambda: fit_temperature(z, y), 1),
    ]
    results = []
    for name, fn, few in cases:
        fn()
        best, median, out = timed(fn, max(2, args.repeats // 2) if few else args.repeats)
        results.append((name, best, median, out))

    ece_a, nll_a, brier_a = results[0][3]
    reading_b = results[1][3]
    drift = max(
        abs(ece_a - reading_b.ece), abs(nll_a - reading_b.nll), abs(brier_a - reading_b.brier)
    )
    base = results[0][1]
    print(
        f"calibration kernels, N = {args.rows:,} rows x K = {args.classes} float64 logits, "
        f"{BINS} bins; numpy {np.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}"
    )
    print()
    print("| case | best (ms) | median (ms) | best / (a) |")
    print("|---|---:|---:|---:|")
    for name, best, median, _ in results:
        print(f"| {name} | {best * 1e3:.1f} | {median * 1e3:.1f} | {best / base:.2f}x |")
    fit = results[3][3]
    print()
    print(
        f"(b) vs (a): largest |difference| in ECE/NLL/Brier = {drift:.1e}; "
        f"(d) fitted T = {fit.temperature:.6f} in {fit.evaluations} objective evaluations."
    )


if __name__ == "__main__":
    main()
