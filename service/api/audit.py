"""The audit log: filtered listing (JSON or CSV) and verification of its hash chain."""

from __future__ import annotations

import csv
import io
import json

from flask import Blueprint, Response, jsonify, request

from service.api.auth import requires
from service.api.query import check_known, cursor_arg, encode_cursor, limit_arg, timestamp_arg
from service.api.session import db_session
from service.auth import Permission
from service.errors import ErrorDetail, ValidationFailed
from service.storage import audit
from service.validation import format_timestamp

bp = Blueprint("audit", __name__, url_prefix="/v1/audit")

_CSV_COLUMNS = (
    "seq",
    "ts",
    "type",
    "actor",
    "model",
    "contract_id",
    "details",
    "prev_sha256",
    "sha256",
)


@bp.get("/events")
@requires(Permission.READ)
def events() -> Response:
    """Audit events oldest first, filtered by model, type and time; paginated; JSON or CSV."""
    check_known(("model", "type", "since", "until", "limit", "cursor", "format"))
    output = request.args.get("format", "json")
    if output not in ("json", "csv"):
        raise ValidationFailed("invalid format", [ErrorDetail("format", "json or csv")])
    limit = limit_arg(default=100, maximum=1000)
    rows = audit.list_events(
        db_session(),
        model=request.args.get("model"),
        type=request.args.get("type"),
        since=timestamp_arg("since"),
        until=timestamp_arg("until"),
        after_seq=cursor_arg(),
        limit=limit + 1,
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].seq) if len(rows) > limit else None
    records = [
        {
            "seq": e.seq,
            "ts": format_timestamp(e.ts),
            "type": e.type,
            "actor": e.actor,
            "model": e.model,
            "contract_id": e.contract_id,
            "details": e.details,
            "prev_sha256": e.prev_sha256,
            "sha256": e.sha256,
        }
        for e in page
    ]
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(_CSV_COLUMNS)
        for r in records:
            writer.writerow(
                [json.dumps(r[c], sort_keys=True) if c == "details" else r[c] for c in _CSV_COLUMNS]
            )
        response = Response(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        if next_cursor:
            response.headers["X-Next-Cursor"] = next_cursor
        return response
    return jsonify({"events": records, "next_cursor": next_cursor})


@bp.get("/verify")
@requires(Permission.READ)
def verify() -> Response:
    """Walk the hash chain from the first event; report the first one that does not fit."""
    check_known(())
    return jsonify(audit.verify_chain(db_session()))
