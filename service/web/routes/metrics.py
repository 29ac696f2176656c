"""GET /metrics (open): the stored calibration gauges plus the process counters and histograms."""

from __future__ import annotations

import threading
import time

from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy.exc import SQLAlchemyError

from service.common.clock import utcnow
from service.export.collector import live_text
from service.export.instruments import (
    INGEST_ROUTES,
    REQUEST_DURATION,
    UNMATCHED,
    method_label,
    record_rejection,
)
from service.export.reading_store import StoredText, stored_exposition
from service.stream.fold_store import fleet_fold_status
from service.web.db_session import database
from service.web.operations import PROMETHEUS_TEXT, operation
from service.web.route_names import route_template

bp = Blueprint("metrics", __name__)


#: The stored exposition this process served last (each gunicorn worker keeps its own).
_last: dict[str, StoredText] = {}
_last_lock = threading.Lock()


@bp.get("/metrics")
@operation(
    operation_id="metrics",
    media={PROMETHEUS_TEXT: {"type": "string"}},
    reply_description="text format",
)
def metrics() -> Response:
    """Prometheus exposition.

    The stored calibration gauges as the refresher last assembled them (never a half-refreshed
    fleet, never a recomputation, no write lock taken; the text is read again only when its
    digest changed), the models' readings ages and label fold status, then the process counters.
    """
    with _last_lock:
        known = _last.get("text")
    try:
        with database().read_session() as session:
            stored = stored_exposition(session, known)
            folds = fleet_fold_status(session)
        readable = True
    except SQLAlchemyError:
        stored, readable, folds = None, False, {}
    if stored is not None:
        with _last_lock:
            _last["text"] = stored
    if current_app.config["CALMON_SETTINGS"].metrics_dir:
        process = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(process)
    else:
        process = REGISTRY
    gauges, times = (stored.body, stored.times) if stored else (b"", None)
    body = gauges + live_text(times, utcnow(), readable, folds) + generate_latest(process)
    return Response(body, content_type=CONTENT_TYPE_LATEST)


def init_metrics(app: Flask) -> None:
    """Time every request by its route template; count the items of rejected ingest requests
    (as the error reply counted them: ``service.web.http_errors.RejectedRequest``)."""

    @app.before_request
    def _start_timer() -> None:
        g.request_started = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        started = g.get("request_started")
        endpoint = route_template(request.url_rule) or UNMATCHED
        if started is not None:
            REQUEST_DURATION.labels(
                endpoint, method_label(request.method), str(response.status_code)
            ).observe(time.perf_counter() - started)
        if response.status_code >= 400 and endpoint in INGEST_ROUTES:
            # Kept by the error reply: its details may list only the first of many items.
            rejected = g.get("rejected_request")
            if rejected is None:
                record_rejection(endpoint, "error", 0)
            else:
                record_rejection(endpoint, rejected.code, rejected.items)
        return response
