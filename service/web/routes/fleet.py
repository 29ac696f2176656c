"""The fleet as JSON: the models, worst status first, with their status per window."""

from __future__ import annotations

from flask import Blueprint, Response, current_app

from service.auth.tokens import Permission
from service.common.clock import utcnow
from service.export.fleet import model_summaries
from service.export.replies import ModelList
from service.web.auth import requires
from service.web.db_session import db_session
from service.web.operations import operation
from service.web.queries import PageQuery, fetch_page
from service.web.replies import reply

bp = Blueprint("fleet", __name__, url_prefix="/v1")


@bp.get("/models")
@requires(Permission.READ)
@operation(
    operation_id="listModels",
    reply=ModelList,
    reply_description="a page",
    query=PageQuery,
)
def list_models() -> Response:
    """List models, worst status first.

    The models with a contract, worst stored status first (then by name), each with the worst
    status of its slices per window, as the fleet page shows them; paginated. A page continues
    after a position in that order, so a model whose status changes between pages can be listed
    twice or skipped.
    """
    query = PageQuery.parse()
    windows = list(current_app.config["CALMON_SETTINGS"].windows)
    page = fetch_page(
        query,
        lambda cursor, limit: model_summaries(db_session(), windows, utcnow(), cursor or 0, limit),
        seq=lambda row: row[0],
    )
    return reply(
        ModelList,
        {"models": [summary for _, summary in page.rows], "next_cursor": page.next_cursor},
    )
