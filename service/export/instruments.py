"""In-process counters and histograms, declared once per process.

Under gunicorn, ``PROMETHEUS_MULTIPROC_DIR`` is set before the workers start (``service.server``)
so these add up across workers, the refresher thread's counters included. Every label takes
values from a bounded set: model names (registered by an admin), outcomes and reasons the code
names, route templates, and the HTTP methods of ``METHODS``.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REJECTED_ITEMS = Counter(
    "calmon_rejected_items",
    "Items of rejected requests, by endpoint and reason.",
    ["endpoint", "reason"],
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


INGEST_ROUTES = ("/v1/predictions", "/v1/labels")
#: The ``reason`` of ``calmon_rejected_items_total``: the error codes an ingest reply can carry
#: (``service.web.http_errors``, ``service.common.errors``); any other code counts as ``other``.
REJECTION_REASONS = (
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "conflict",
    "payload_too_large",
    "unsupported_media_type",
    "validation_failed",
    "no_active_contract",
    "unreadable_contract",
    "too_many_requests",
    "database_unavailable",
    "unavailable",
    "internal_error",
    "error",
    "other",
)


def record_rejection(route: str, reason: str, items: int) -> None:
    """Count the items of a rejected ingest request."""
    if route in INGEST_ROUTES:
        label = reason if reason in REJECTION_REASONS else "other"
        REJECTED_ITEMS.labels(route, label).inc(max(items, 1))


def _export_zeros() -> None:
    """Create every (route, reason) series of the rejection counter at 0, so a dashboard reads
    0 rather than no data before the first rejection (under gunicorn each worker writes its
    zeros to its multiprocess file as it imports this module)."""
    for route in INGEST_ROUTES:
        for reason in REJECTION_REASONS:
            REJECTED_ITEMS.labels(route, reason)


_export_zeros()
