"""Batch bodies sent as an Apache Arrow IPC stream (``application/vnd.apache.arrow.stream``).

The model, and for predictions the optional contract id, come as query parameters (``model``,
``contract_id``, declared beside the routes); the rows as the stream's columns
(``service.stream.arrow_stream``, ``arrow_batches``). A body that is not exactly one complete,
valid stream is a 400; the size limit (413) is Flask's, as for JSON, and dictionary-encoded
strings may decode to no more than it.
"""

from __future__ import annotations

import pyarrow as pa
from flask import current_app, request

from service.stream.arrow_stream import ARROW_STREAM, UnreadableArrow, read_stream
from service.stream.batch_bodies import MAX_BATCH_ITEMS
from service.web.http_errors import ApiError


def is_arrow() -> bool:
    """Whether the request body declares itself an Arrow IPC stream."""
    return request.mimetype == ARROW_STREAM


def arrow_batch_body() -> pa.Table:
    """The body's table; 400 for an unreadable stream, 422 for a refused table shape."""
    try:
        table = read_stream(
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
    return table
