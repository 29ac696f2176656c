"""The stream's in-process counters and histograms (added up across gunicorn workers,
``service.server``), incremented by the use cases that store what they count
(``service.stream.ingestion``, ``retention``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from prometheus_client import Counter, Histogram

PREDICTIONS_INGESTED = Counter(
    "calmon_predictions_ingested", "Predictions stored (duplicates excluded).", ["model"]
)
LABELS_INGESTED = Counter(
    "calmon_labels_ingested",
    "Labels received, by outcome: joined, pending, duplicate, conflict.",
    ["model", "outcome"],
)
LABEL_DELAY = Histogram(
    "calmon_label_delay_seconds",
    "Seconds from a prediction's event time to its label's time.",
    ["model"],
    buckets=(
        60,
        300,
        900,
        3600,
        4 * 3600,
        12 * 3600,
        86400,
        3 * 86400,
        7 * 86400,
        30 * 86400,
        90 * 86400,
    ),
)
PENDING_LABELS_EXPIRED = Counter(
    "calmon_pending_labels_expired",
    "Labels deleted after waiting CALMON_PENDING_LABEL_DAYS for their prediction.",
    ["model"],
)
PENDING_LABELS_REJECTED = Counter(
    "calmon_pending_labels_rejected",
    "Labels refused because CALMON_MAX_PENDING_LABELS labels already wait for their prediction.",
    ["model"],
)
PENDING_LABELS_DISCARDED = Counter(
    "calmon_pending_labels_discarded",
    "Waiting labels deleted when their prediction arrived: its contract has no class by the"
    " label's name or index.",
    ["model"],
)


def observe_many(histogram: Histogram, values: Sequence[float]) -> None:
    """Observe many values at once: one increment per bucket instead of one call per value.

    Uses the child's bucket counters directly (non-cumulative, as ``observe`` keeps them); a
    client library without them falls back to ``observe``.
    """
    if not len(values):
        return
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None:
        for value in values:
            histogram.observe(value)
        return
    data = np.asarray(values, dtype=np.float64)
    counts = np.bincount(
        np.searchsorted(np.asarray(bounds), data, side="left"), minlength=len(bounds)
    )
    for bucket, count in zip(buckets, counts.tolist(), strict=False):
        if count:
            bucket.inc(count)
    total.inc(float(data.sum()))
