"""The stream's in-process counters (added up across gunicorn workers, ``service.server``)."""

from __future__ import annotations

from prometheus_client import Counter

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
