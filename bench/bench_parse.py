"""Benchmark parsing and validating one batch body: what POST /v1/predictions and /v1/labels do
before touching the database.

    python bench/bench_parse.py [--items 10000] [--classes 10] [--repeats 25]

Times orjson decoding of the raw body, the envelope check and the batch validation (the numpy
fast path for a clean batch, which also proves that no object repeats a key by counting the
body's quotation marks), and prints the median and best wall time per batch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import orjson

from service.common.json_text import JsonText
from service.stream.batch_bodies import parse_envelope
from service.stream.batch_columns import parse_labels, parse_predictions

MAX_ITEMS = 100_000


def _timestamp(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def bodies(items: int, classes: int, now: datetime) -> tuple[bytes, bytes]:
    """Raw JSON of a prediction batch (logits, one cohort key) and of its label batch."""
    rng = np.random.default_rng(0)
    predictions = {
        "model": "bench",
        "predictions": [
            {
                "id": f"p-{i}",
                "ts": _timestamp(now - timedelta(seconds=i)),
                "cohort": {"region": ("eu", "us", "apac")[i % 3]},
                "logits": rng.normal(size=classes).round(6).tolist(),
            }
            for i in range(items)
        ],
    }
    labels = {
        "model": "bench",
        "labels": [
            {"id": f"p-{i}", "label": i % classes, "ts": _timestamp(now)} for i in range(items)
        ],
    }
    return orjson.dumps(predictions), orjson.dumps(labels)


def timed(
    run: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, float]:
    """Median and best time of ``run`` on ``clock`` (wall time by default) in milliseconds,
    after three warm-up runs."""
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return statistics.median(times) * 1000, min(times) * 1000


def batch_arguments(description: str) -> argparse.Namespace:
    """``--items``, ``--classes`` and ``--repeats``: the options of a one-batch benchmark."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=25)
    return parser.parse_args()


def main() -> None:
    args = batch_arguments(__doc__.splitlines()[0])
    now = datetime.now(UTC)
    raw_predictions, raw_labels = bodies(args.items, args.classes, now)
    names = [str(k) for k in range(args.classes)]

    def predictions() -> object:
        body = orjson.loads(raw_predictions)
        JsonText.of(raw_predictions, ["predictions"]).check(body)
        envelope = parse_envelope(body, "predictions", MAX_ITEMS)
        return parse_predictions(envelope.items, task="multiclass", n_classes=args.classes, now=now)

    def labels() -> object:
        body = orjson.loads(raw_labels)
        JsonText.of(raw_labels, ["labels"]).check(body)
        envelope = parse_envelope(body, "labels", MAX_ITEMS)
        return parse_labels(
            envelope.items,
            index_of={name: k for k, name in enumerate(names)},
            n_classes=len(names),
            now=now,
        )

    print(f"| batch of {args.items:,} | median ms | best ms |\n|---|---|---|")
    for name, run in ((f"predictions (K = {args.classes})", predictions), ("labels", labels)):
        median, best = timed(run, args.repeats)
        print(f"| {name} | {median:.1f} | {best:.1f} |")


if __name__ == "__main__":
    main()
