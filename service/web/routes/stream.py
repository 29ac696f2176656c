"""The production stream: predictions and labels in, readings and cohorts out."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta
from typing import Annotated

from flask import Blueprint, Response, current_app
from pydantic import WithJsonSchema

from service.auth.tokens import Permission
from service.common.clock import utcnow
from service.common.errors import ErrorDetail, ValidationFailed
from service.common.values import EARLIEST_TIMESTAMP
from service.config import Settings
from service.stream import fold, ingestion, monitoring
from service.stream import history as histories
from service.stream.batch_bodies import LABELS, PREDICTIONS
from service.stream.cohorts import ALL, KEY_PATTERN, MAX_LENGTH, parse_slice_query
from service.stream.replies import Calibration, Cohorts, History, LabelsApplied, PredictionsAccepted
from service.stream.windows import (
    DURATION_HINT,
    DURATION_PATTERN,
    Window,
    WindowError,
    parse_duration,
)
from service.web.auth import requires
from service.web.batch_body import (
    ArrowLabelsQuery,
    ArrowPredictionsQuery,
    labels_body,
    predictions_body,
)
from service.web.db_session import database, db_session
from service.web.operations import ARROW_STREAM, CSV, JSON, operation
from service.web.queries import (
    NoQuery,
    Query,
    TextParam,
    TimestampParam,
    choice,
    matching,
)
from service.web.replies import reply

bp = Blueprint("stream", __name__, url_prefix="/v1")


def _settings() -> Settings:
    return current_app.config["CALMON_SETTINGS"]  # type: ignore[no-any-return]


@bp.post("/predictions")
@requires(Permission.INGEST)
@operation(
    operation_id="ingestPredictions",
    reply=PredictionsAccepted,
    reply_description="counts",
    body=PREDICTIONS,
    body_media=(JSON, ARROW_STREAM),
    query=ArrowPredictionsQuery,
    errors=(404, 409, 503),
)
def predictions() -> Response:
    """Store a batch of predictions (idempotent per id), as JSON or an Arrow IPC stream."""
    sent = predictions_body()
    result = ingestion.ingest_predictions(database(), db_session(), sent, _settings(), utcnow())
    return reply(PredictionsAccepted, result)


@bp.post("/labels")
@requires(Permission.INGEST)
@operation(
    operation_id="ingestLabels",
    reply=LabelsApplied,
    reply_description="counts",
    body=LABELS,
    body_media=(JSON, ARROW_STREAM),
    query=ArrowLabelsQuery,
    errors=(404, 503),
)
def labels() -> Response:
    """Join a batch of labels, as JSON or an Arrow IPC stream.

    Join a batch of labels to their predictions (JSON, or an Arrow IPC stream).
    """
    sent = labels_body()
    result = ingestion.ingest_labels(database(), db_session(), sent, _settings(), utcnow())
    return reply(LabelsApplied, result)


#: A duration: a positive integer and a unit (``90s``, ``15m``, ``24h``, ``7d``).
DurationParam = matching(DURATION_PATTERN, DURATION_HINT)


#: A cohort slice as a query parameter: ``all`` or ``key=value`` (also ``key:value``; a value of
#: 1-``MAX_LENGTH`` characters); checked by ``_cohort``.
_KEY = KEY_PATTERN.pattern.removesuffix("\\Z")
CohortParam = Annotated[
    TextParam,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": f"^(all|{_KEY}[=:].{{1,{MAX_LENGTH}}})$",
        }
    ),
]


def _cohort(raw: str | None) -> str:
    """The ``cohort`` query parameter (``key=value``, or ``key:value``; default ``all``)."""
    try:
        slice_ = parse_slice_query(raw)
        if slice_ != ALL and not KEY_PATTERN.fullmatch(slice_.partition("=")[0]):
            raise ValueError("the cohort key is 1-64 letters, digits, _ . - and nothing else")
    except ValueError as exc:
        raise ValidationFailed("invalid cohort", [ErrorDetail("cohort", str(exc))]) from None
    return slice_


class WindowQuery(Query):
    """A reading's window (trailing ``window``, default 24h, or ``start`` with ``end``) and
    cohort slice (``key=value``; default all)."""

    window: DurationParam = None  # type: ignore[valid-type]
    start: TimestampParam = None
    end: TimestampParam = None
    cohort: CohortParam = None

    def slice(self) -> str:
        """The cohort slice's name (``all`` or ``key=value``)."""
        return _cohort(self.cohort)

    def reading_window(self, now: datetime) -> Window:
        """The window the parameters name, at ``now``."""
        try:
            if self.start is not None or self.end is not None:
                if self.window is not None:
                    raise WindowError("window", "give either window or start/end, not both")
                if self.start is None or self.end is None:
                    raise WindowError(
                        "start" if self.start is None else "end", "start and end go together"
                    )
                return Window.between(self.start, self.end)
            return Window.trailing(self.window or "24h", now)
        except WindowError as exc:
            raise ValidationFailed("invalid window", [ErrorDetail(exc.field, str(exc))]) from None


Consistency = choice("true", "false")


class CalibrationQuery(WindowQuery):
    """A window and slice; ``consistent=true`` folds all the model's waiting labels first."""

    consistent: Consistency = "false"  # type: ignore[valid-type]


def _fold_first(query: CalibrationQuery | HistoryQuery, model: str, now: datetime) -> None:
    """Fold the model's queued labels before the read: with ``consistent=true`` all of them
    (every label acknowledged by ``now`` is then in the buckets), by default only when at most
    ``fold.READ_FOLD_LIMIT`` wait (the reply's ``labels_unfolded`` states those left out)."""
    if query.consistent == "true":
        fold.fold_model(db_session(), model, now)
    else:
        fold.fold_for_read(db_session(), model, now)


@bp.get("/models/<model>/calibration")
@requires(Permission.READ)
@operation(
    operation_id="calibration",
    reply=Calibration,
    reply_description="reading, bins, baseline, drift",
    query=CalibrationQuery,
)
def calibration(model: str) -> Response:
    """The reading of a window and cohort slice.

    The reading of a window and cohort slice, with bins, baseline and drift.
    """
    now = utcnow()
    query = CalibrationQuery.parse(now)
    slice_, window = query.slice(), query.reading_window(now)
    _fold_first(query, model, now)
    found = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    return reply(Calibration, found)


@bp.get("/models/<model>/cohorts")
@requires(Permission.READ)
@operation(
    operation_id="cohorts",
    reply=Cohorts,
    reply_description="slices with counts",
    query=NoQuery,
)
def cohorts(model: str) -> Response:
    """Cohort slices seen.

    Slices seen for the model, with prediction and label counts.
    """
    NoQuery.parse()
    slices = monitoring.cohort_slices(db_session(), model)
    return reply(Cohorts, {"model": model, "slices": slices})


#: A history without ``start`` covers this much before its end.
DEFAULT_HISTORY = timedelta(days=7)


class HistoryRangeQuery(Query):
    """A history's range: ``start`` (default ``end`` minus 7 days, not before
    ``EARLIEST_TIMESTAMP``) to ``end`` (default now) in
    ``step``s (default 1h, a multiple of 5 minutes) of a cohort slice."""

    start: TimestampParam = None
    end: TimestampParam = None
    step: DurationParam = None  # type: ignore[valid-type]
    cohort: CohortParam = None

    def slice(self) -> str:
        """The cohort slice's name (``all`` or ``key=value``)."""
        return _cohort(self.cohort)

    def range(self, now: datetime) -> tuple[datetime, datetime, timedelta]:
        """``start``, ``end`` and ``step`` with their defaults."""
        end = self.end or now
        start = self.start or max(end - DEFAULT_HISTORY, EARLIEST_TIMESTAMP)
        try:
            step = parse_duration(self.step or "1h")
        except WindowError as exc:
            raise ValidationFailed("invalid step", [ErrorDetail("step", str(exc))]) from None
        return start, end, step


class HistoryQuery(HistoryRangeQuery):
    """A history's range, its ``format`` (json or csv) and whether to fold first."""

    format: choice("json", "csv") = "json"  # type: ignore[valid-type]
    consistent: Consistency = "false"  # type: ignore[valid-type]


@bp.get("/models/<model>/history")
@requires(Permission.READ)
@operation(
    operation_id="history",
    reply=History,
    reply_description="one point per step, oldest first",
    media={CSV: {"type": "string"}},
    query=HistoryQuery,
)
def history(model: str) -> Response:
    """A cohort slice's readings per step (step a multiple of 5 minutes; default 7 days at 1 h), as
    JSON or (format=csv) as CSV.

    A cohort slice's readings per step (JSON, or CSV with ``format=csv``).
    """
    now = utcnow()
    query = HistoryQuery.parse(now)
    slice_, (start, end, step) = query.slice(), query.range(now)
    _fold_first(query, model, now)
    found = histories.model_history(db_session(), model, slice_, start, end, step, now)
    if query.format == "json":
        return reply(History, found)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(histories.CSV_COLUMNS)
    writer.writerows(found.csv_rows())
    response = Response(out.getvalue(), mimetype="text/csv")
    response.headers["Content-Disposition"] = f'attachment; filename="{model}-history.csv"'
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
