"""Benchmark the calibrator families: fit time per family, and what each costs the stream.

    python bench/bench_calibrators.py [--sizes 10000 100000] [--classes 10] [--items 10000]

Fit time: seeded miscalibrated data of N rows (multiclass with K classes, binary scores), one
fit per family and size, CPU seconds. Stream cost: the bucket statistics of one labeled batch
of ``--items`` rows (``bench_bucketing``'s batch: what a label batch adds to its buckets, the
calibrator-dependent part of ingest) under a temperature, a matrix-scaling and a one-vs-rest
isotonic contract fitted on the same data, median CPU ms over ``--repeats`` runs, and each
family's extra time relative to temperature.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
from bench_bucketing import batch, contract
from bench_parse import timed

from service.calibration import Calibrator
from service.contracts.fitting import fit_method
from service.stream.bucketing import bucket_deltas

MULTICLASS = ("temperature", "vector", "matrix", "isotonic")
BINARY = ("temperature", "platt", "beta", "isotonic", "histogram")


def multiclass_data(n: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * 2.0
    truth = np.exp(0.6 * logits + rng.normal(size=classes) * 0.3)
    truth /= truth.sum(axis=1, keepdims=True)
    labels = (truth.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    return logits, np.minimum(labels, classes - 1)


def binary_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scores = rng.beta(0.8, 1.1, size=n)
    truth = scores**2 / (scores**2 + 0.5 * (1 - scores) ** 0.7)
    return scores, (rng.random(n) < truth).astype(np.int64)


def fit_seconds(task: str, method: str, inputs: np.ndarray, labels: np.ndarray) -> float:
    start = time.process_time()
    fit_method(task, method, inputs, labels)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    print("| fit | " + " | ".join(f"N = {n:,} (s)" for n in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    for task, methods in (("multiclass", MULTICLASS), ("binary", BINARY)):
        data = {
            n: multiclass_data(n, args.classes, n) if task == "multiclass" else binary_data(n, n)
            for n in args.sizes
        }
        for method in methods:
            cells = [f"{fit_seconds(task, method, *data[n]):.3f}" for n in args.sizes]
            name = f"{task} {method}" + (f" (K = {args.classes})" if task == "multiclass" else "")
            print(f"| {name} | " + " | ".join(cells) + " |")

    fit_logits, fit_labels = multiclass_data(10_000, args.classes, 7)
    rows = batch(args.items, args.classes, 0.03, 2)
    base = contract(args.classes)
    print()
    print(f"| labeled batch of {args.items:,} (K = {args.classes}) | median ms | vs temperature |")
    print("|---|---|---|")
    reference = None
    for method in ("temperature", "matrix", "isotonic"):
        calibrator: Calibrator = fit_method("multiclass", method, fit_logits, fit_labels)
        model = dataclasses.replace(
            base, spec=dataclasses.replace(base.spec, calibrator=calibrator)
        )

        def run(model=model) -> object:
            return bucket_deltas(
                model,
                seconds=rows.seconds,
                slices=rows.slices,
                inputs=rows.inputs,
                labels=rows.labels,
                new=False,
            )

        median, _ = timed(run, args.repeats, clock=time.process_time)
        reference = reference or median
        print(f"| {method} | {median:.1f} | {100 * (median / reference - 1):+.1f}% |")


if __name__ == "__main__":
    main()
