"""In-process counters and histograms, declared once per process.

Under gunicorn, ``PROMETHEUS_MULTIPROC_DIR`` is set before the workers start (``service.server``)
so these add up across workers, the refresher thread's counters included. Every label takes
values from a bounded set: model names (registered by an admin), outcomes and reasons the code
names, route templates, and the HTTP methods of ``METHODS``.
"""

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
REJECTED_ITEMS = Counter(
    "calmon_rejected_items",
    "Items of rejected requests, by endpoint and reason.",
    ["endpoint", "reason"],
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
REQUEST_DURATION = Histogram(
    "calmon_http_request_duration_seconds",
    "HTTP request latency by route template (unmatched: no route), method (OTHER: not a"
    " standard method) and status.",
    ["endpoint", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
REFRESH_FAILURES = Counter(
    "calmon_refresh_failures",
    "Refreshes of a model's stored readings that raised (its previous readings stay served).",
    ["model"],
)
#: The methods ``calmon_http_request_duration_seconds`` names; any other is ``OTHER``.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The ``endpoint`` of requests no route matched (404s, and 405s, whose rule is unknown).
UNMATCHED = "unmatched"


def method_label(method: str) -> str:
    """The request method as a label value: itself if standard, else ``OTHER``."""
    return method if method in METHODS else "OTHER"


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


INGEST_ROUTES = frozenset({"/v1/predictions", "/v1/labels"})


def record_rejection(route: str, reason: str, items: int) -> None:
    """Count the items of a rejected ingest request."""
    if route in INGEST_ROUTES:
        REJECTED_ITEMS.labels(route, reason).inc(max(items, 1))
