"""Benchmark the bucket statistics of one batch: what a label or prediction batch adds to its
5-minute and hour buckets, computed in calmon before any bucket row is read or written.

    python bench/bench_bucketing.py [--items 10000] [--classes 10] [--repeats 25]

The batches are shaped like ``bench_stream.py --predictions 10000000``: 10,000,000 predictions
over 30 days with one cohort key of three values. The prediction batch covers the 43 minutes
of event time its 10,000 predictions span; the label batch holds the labels of such a span,
3% of them displaced to predictions anywhere in the 30 days. Prints the median and best CPU
time per batch and per item.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import NamedTuple

import numpy as np
from bench_parse import batch_arguments, timed

from service.calibration import DriftPolicy, TemperatureCalibrator
from service.calibration.vocabulary import Task
from service.contracts.model import Baseline, Contract, ContractSpec, DataWindow, Split
from service.stream.bucketing import bucket_deltas

SECONDS_PER_PREDICTION = 30 * 86400 / 10_000_000
REGIONS = ("emea", "apac", "amer")


def contract(classes: int) -> Contract:
    spec = ContractSpec(
        model="bench",
        checkpoint="c",
        task=Task.MULTICLASS,
        classes=tuple(str(k) for k in range(classes)),
        calibrator=TemperatureCalibrator(1.3),
        objective="nll",
        population="p",
        outcome="o",
        data_window=DataWindow("2026-10-01T00:00:00.000000Z", "2026-10-31T00:00:00.000000Z"),
        split=Split("random"),
        bin_edges=tuple(np.linspace(0.0, 1.0, 16).tolist()),
        baseline=Baseline({}),
        policy=DriftPolicy(0.05, 0.02, 10),
    )
    return Contract("c-1", 1, spec, datetime(2026, 11, 1, tzinfo=UTC), "bench", "0" * 64)


class Batch(NamedTuple):
    seconds: np.ndarray
    slices: list[list[str]]
    inputs: np.ndarray
    labels: np.ndarray


def batch(items: int, classes: int, displaced: float, seed: int) -> Batch:
    """Event seconds, slices and logits of one batch; ``displaced`` of its rows anywhere in
    30 days, the others in one span of ``items`` consecutive predictions."""
    rng = np.random.default_rng(seed)
    start = 1_780_000_000
    seconds = start + 15 * 86400 + (np.arange(items) * SECONDS_PER_PREDICTION).astype(np.int64)
    moved = rng.random(items) < displaced
    seconds[moved] = start + rng.integers(0, 30 * 86400, int(moved.sum()))
    regions = rng.integers(0, len(REGIONS), items)
    return Batch(
        seconds=seconds,
        slices=[["all", f"region={REGIONS[r]}"] for r in regions],
        inputs=rng.normal(size=(items, classes)) * 2,
        labels=rng.integers(0, classes, items),
    )


def main() -> None:
    args = batch_arguments(__doc__.splitlines()[0])
    model = contract(args.classes)
    predictions = batch(args.items, args.classes, 0.0, 1)
    labels = batch(args.items, args.classes, 0.03, 2)

    def deltas(rows: Batch, labels: np.ndarray, new: bool) -> Callable[[], dict]:
        return lambda: bucket_deltas(
            model,
            seconds=rows.seconds,
            slices=rows.slices,
            inputs=rows.inputs,
            labels=labels,
            new=new,
        )

    runs = (
        ("predictions", deltas(predictions, np.full(args.items, -1), True)),
        ("labels, 3% displaced", deltas(labels, labels.labels, False)),
    )
    header = f"batch of {args.items:,} (K = {args.classes})"
    print(f"| {header} | buckets | median ms | best ms | µs per item |")
    print("|---|---|---|---|---|")
    for name, run in runs:
        buckets = len(run())
        median, best = timed(run, args.repeats, clock=time.process_time)
        per_item = median * 1000 / args.items
        print(f"| {name} | {buckets:,} | {median:.1f} | {best:.1f} | {per_item:.2f} |")


if __name__ == "__main__":
    main()
