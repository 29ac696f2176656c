"""The audit log."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from service.api.auth import requires
from service.api.query import check_known, cursor_arg, encode_cursor, limit_arg, timestamp_arg
from service.api.session import db_session
from service.auth import Permission
from service.storage import audit
from service.validation import format_timestamp

bp = Blueprint("audit", __name__, url_prefix="/v1/audit")


@bp.get("/events")
@requires(Permission.READ)
def events() -> Response:
    """Audit events oldest first, filtered by model, type and time; paginated."""
    check_known(("model", "type", "since", "until", "limit", "cursor"))
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
    return jsonify(
        {
            "events": [
                {
                    "seq": e.seq,
                    "ts": format_timestamp(e.ts),
                    "type": e.type,
                    "actor": e.actor,
                    "model": e.model,
                    "contract_id": e.contract_id,
                    "details": e.details,
                }
                for e in page
            ],
            "next_cursor": encode_cursor(page[-1].seq) if len(rows) > limit else None,
        }
    )
