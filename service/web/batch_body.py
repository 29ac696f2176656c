"""The body of an ingest route, JSON or an Apache Arrow IPC stream, read as one ``SentBatch``.

A JSON body (``application/json``) carries the model, the optional contract id and the items
(``service.web.bodies``), and takes no query parameters. An Arrow body
(``application/vnd.apache.arrow.stream``) carries the rows as the stream's columns
(``service.stream.arrow_stream``, ``arrow_batches``) and the model, and for predictions the
optional contract id, as query parameters. A body that is not exactly one complete, valid stream
is a 400; the size limit (413) is Flask's, as for JSON, and dictionary-encoded strings may decode
to no more than it.
"""

from __future__ import annotations

import pyarrow as pa
from flask import current_app, request
from pydantic import Field

from service.stream.arrow_stream import ARROW_STREAM, UnreadableArrow, read_stream
from service.stream.batch_bodies import MAX_BATCH_ITEMS
from service.stream.sent_batches import SentBatch
from service.web.bodies import json_body
from service.web.http_errors import ApiError
from service.web.queries import NameParam, NoQuery, Query, TextParam

_ARROW_ONLY = "Arrow bodies only; a JSON body carries it in the body"


class ArrowPredictionsQuery(Query):
    """An Arrow body's batch fields: its model and, optionally, the contract it binds to
    (a JSON body carries them in the body and takes no query parameters)."""

    model: NameParam = Field(default=None, description=_ARROW_ONLY)  # type: ignore[valid-type]
    contract_id: TextParam = Field(default=None, description=_ARROW_ONLY)


class ArrowLabelsQuery(Query):
    """An Arrow body's model (a JSON body carries it in the body)."""

    model: NameParam = Field(default=None, description=_ARROW_ONLY)  # type: ignore[valid-type]


def predictions_body() -> SentBatch:
    """The prediction batch of ``POST /v1/predictions``, whichever content type came."""
    if request.mimetype != ARROW_STREAM:
        return _json_body("predictions")
    query = ArrowPredictionsQuery.parse()
    return SentBatch.of_arrow(query.model, query.contract_id, "predictions", _arrow_table())


def labels_body() -> SentBatch:
    """The label batch of ``POST /v1/labels``, whichever content type came."""
    if request.mimetype != ARROW_STREAM:
        return _json_body("labels")
    query = ArrowLabelsQuery.parse()
    return SentBatch.of_arrow(query.model, None, "labels", _arrow_table())


def _json_body(items_key: str) -> SentBatch:
    NoQuery.parse()
    return SentBatch.of_json(json_body(), items_key)


def _arrow_table() -> pa.Table:
    """The body's table; 400 for an unreadable stream, 422 for a refused table shape."""
    try:
        return read_stream(
            request.get_data(cache=False),
            MAX_BATCH_ITEMS,
            current_app.config["CALMON_SETTINGS"].max_body_bytes,
        )
    except UnreadableArrow as exc:
        raise ApiError(
            400,
            str(exc),
            details=[{"field": "(body)", "message": str(exc)}],
        ) from None
