"""The production stream: predictions and labels in, readings and cohorts out."""

from __future__ import annotations

import csv
import io
from collections.abc import Collection
from dataclasses import asdict
from datetime import datetime, timedelta

import orjson
from flask import Blueprint, Response, current_app, jsonify, request

from service.auth.tokens import Permission
from service.common.clock import utcnow
from service.common.errors import ErrorDetail, ValidationFailed
from service.config import Settings
from service.export.instruments import (
    LABEL_DELAY,
    LABELS_INGESTED,
    PREDICTIONS_INGESTED,
    observe_many,
)
from service.stream import fold, ingestion
from service.stream import history as histories
from service.stream import readings as monitoring
from service.stream.cohorts import ALL, KEY_PATTERN, parse_slice_query
from service.stream.windows import Window, WindowError, parse_duration
from service.web.arrow_body import arrow_batch_body, is_arrow
from service.web.auth import requires
from service.web.bodies import json_batch_body
from service.web.db_session import db_session
from service.web.queries import check_known, timestamp_arg

bp = Blueprint("stream", __name__, url_prefix="/v1")


def _settings() -> Settings:
    return current_app.config["CALMON_SETTINGS"]  # type: ignore[no-any-return]


@bp.post("/predictions")
@requires(Permission.INGEST)
def predictions() -> Response:
    """Store a batch of predictions (idempotent per id), as JSON or as an Arrow IPC stream."""
    if is_arrow():
        table, params = arrow_batch_body(("model", "contract_id"))
        result = ingestion.ingest_arrow_predictions(
            db_session(), params["model"], params["contract_id"], table, _settings(), utcnow()
        )
    else:
        body, text = json_batch_body()
        result = ingestion.ingest_predictions(db_session(), body, _settings(), utcnow(), text)
    PREDICTIONS_INGESTED.labels(result.model).inc(result.accepted)
    return jsonify(result.to_dict())


@bp.post("/labels")
@requires(Permission.INGEST)
def labels() -> Response:
    """Join a batch of labels to their predictions (JSON, or an Arrow IPC stream)."""
    if is_arrow():
        table, params = arrow_batch_body(("model",))
        result = ingestion.ingest_arrow_labels(
            db_session(), params["model"], table, _settings(), utcnow()
        )
    else:
        body, text = json_batch_body()
        result = ingestion.ingest_labels(db_session(), body, _settings(), utcnow(), text)
    for outcome, count in (
        ("joined", result.joined),
        ("pending", result.pending),
        ("duplicate", result.duplicates),
        ("conflict", len(result.conflicts)),
    ):
        if count:
            LABELS_INGESTED.labels(result.model, outcome).inc(count)
    observe_many(LABEL_DELAY.labels(result.model), result.delays_seconds)
    return jsonify(result.to_dict())


def _window(now: datetime) -> Window:
    name = request.args.get("window")
    start, end = timestamp_arg("start", now), timestamp_arg("end", now)
    try:
        if start is not None or end is not None:
            if name is not None:
                raise WindowError("window", "give either window or start/end, not both")
            if start is None or end is None:
                raise WindowError("start" if start is None else "end", "start and end go together")
            return Window.between(start, end)
        return Window.trailing(name or "24h", now)
    except WindowError as exc:
        raise ValidationFailed("invalid window", [ErrorDetail(exc.field, str(exc))]) from None


def slice_and_window(now: datetime, also: Collection[str] = ()) -> tuple[str, Window]:
    """The ``cohort`` and ``window`` (or ``start``/``end``) query parameters, validated; ``also``
    names further parameters the caller reads itself."""
    check_known(("window", "start", "end", "cohort", *also))
    return _slice(), _window(now)


def _slice() -> str:
    """The ``cohort`` query parameter (``key:value`` or ``key=value``; default ``all``)."""
    try:
        slice_ = parse_slice_query(request.args.get("cohort"))
        if slice_ != ALL and not KEY_PATTERN.fullmatch(slice_.partition("=")[0]):
            raise ValueError("the cohort key is 1-64 letters, digits, _ . - and nothing else")
    except ValueError as exc:
        raise ValidationFailed("invalid cohort", [ErrorDetail("cohort", str(exc))]) from None
    return slice_


def _consistent(model: str, now: datetime) -> None:
    """With ``consistent=true``, fold the model's queued labels before the read (every label
    acknowledged by ``now`` is then in the buckets); ``false`` (the default) reads at once."""
    raw = request.args.get("consistent", "false")
    if raw not in ("true", "false"):
        raise ValidationFailed(
            "invalid consistent", [ErrorDetail("consistent", "must be true or false")]
        )
    if raw == "true":
        fold.fold_model(db_session(), model, now)


@bp.get("/models/<model>/calibration")
@requires(Permission.READ)
def calibration(model: str) -> Response:
    """The reading of a window and cohort slice, with bins, baseline and drift."""
    now = utcnow()
    slice_, window = slice_and_window(now, also=("consistent",))
    _consistent(model, now)
    return jsonify(
        monitoring.calibration_reading(db_session(), model, window, slice_, now).to_dict()
    )


@bp.get("/models/<model>/cohorts")
@requires(Permission.READ)
def cohorts(model: str) -> Response:
    """Slices seen for the model, with prediction and label counts."""
    check_known(())
    slices = monitoring.cohort_slices(db_session(), model)
    return jsonify({"model": model, "slices": [asdict(s) for s in slices]})


#: A history without ``start`` covers this much before its end.
DEFAULT_HISTORY = timedelta(days=7)


def history_range(now: datetime) -> tuple[str, datetime, datetime, timedelta]:
    """The ``cohort``, ``start``, ``end`` and ``step`` of a history, validated (by default the 7
    days before ``now`` in 1-hour steps)."""
    end = timestamp_arg("end", now) or now
    start = timestamp_arg("start", now) or end - DEFAULT_HISTORY
    try:
        step = parse_duration(request.args.get("step", "1h"))
    except WindowError as exc:
        raise ValidationFailed("invalid step", [ErrorDetail("step", str(exc))]) from None
    return _slice(), start, end, step


@bp.get("/models/<model>/history")
@requires(Permission.READ)
def history(model: str) -> Response:
    """A cohort slice's readings per step (JSON, or CSV with ``format=csv``)."""
    check_known(("cohort", "start", "end", "step", "format", "consistent"))
    now = utcnow()
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "csv"):
        raise ValidationFailed("invalid format", [ErrorDetail("format", "must be json or csv")])
    slice_, start, end, step = history_range(now)
    _consistent(model, now)
    found = histories.model_history(db_session(), model, slice_, start, end, step, now)
    if fmt == "json":
        return Response(orjson.dumps(found.to_dict()), mimetype="application/json")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(histories.CSV_COLUMNS)
    writer.writerows(found.csv_rows())
    response = Response(out.getvalue(), mimetype="text/csv")
    response.headers["Content-Disposition"] = f'attachment; filename="{model}-history.csv"'
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
