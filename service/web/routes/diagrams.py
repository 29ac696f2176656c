"""The SVG diagrams of the API: the reliability diagram of a window and cohort slice or of a
contract's baseline, and the ECE-over-time chart of a slice. A page's session cookie is accepted
as well as a bearer token (the review pages inline and link them), a model's diagrams fold its
waiting labels first as its readings do (``fold.fold_for_read``), and every response carries
the review pages' security headers (``service.web.routes.ui.security_headers``), a
Content-Security-Policy that allows nothing for an SVG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from flask import Blueprint, Response

from service.auth.tokens import Permission
from service.calibration.readings import ReliabilityBin
from service.common.clock import utcnow
from service.contracts import service as contracts_service
from service.stream import fold, monitoring
from service.stream import history as histories
from service.web import ui_models as pages
from service.web.auth import requires
from service.web.db_session import db_session
from service.web.history_svg import render_history
from service.web.operations import SVG, operation
from service.web.queries import Query, choice
from service.web.reliability_svg import render
from service.web.routes.stream import HistoryRangeQuery, WindowQuery
from service.web.routes.ui import security_headers

bp = Blueprint("diagrams", __name__)
bp.after_request(security_headers)


View = TypeVar("View", bound=Callable[..., Response])


def _diagram(path: str, operation_id: str, query: type[Query]) -> Callable[[View], View]:
    """Declare a diagram route: ``GET path`` for the ``read`` permission (a page's session
    cookie accepted), replying SVG, documented as ``operation_id`` with the parameters
    ``query``."""

    def declare(view: View) -> View:
        declared = operation(
            operation_id=operation_id,
            media={SVG: {"type": "string"}},
            reply_description="SVG",
            query=query,
        )(view)
        return bp.get(path)(requires(Permission.READ, allow_cookie=True)(declared))

    return declare


def _svg(body: str) -> Response:
    return Response(body, content_type=SVG)


def _reliability_svg(bins: Sequence[ReliabilityBin], title: str, subtitle: str) -> Response:
    """A reliability diagram of ``bins``, as an SVG response."""
    return _svg(render(bins, title=title, subtitle=subtitle))


@_diagram("/v1/models/<model>/reliability.svg", "modelDiagram", WindowQuery)
def model_svg(model: str) -> Response:
    """The reliability diagram (SVG) of a window and cohort, with bin counts.

    The reliability diagram of a window and cohort (same parameters as the calibration).
    """
    now = utcnow()
    query = WindowQuery.parse(now)
    slice_, window = query.slice(), query.reading_window(now)
    fold.fold_for_read(db_session(), model, now)
    measured = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    return _reliability_svg(
        measured.reading.bins,
        f"{model}: reliability",
        f"{measured.cohort}, {window.name or 'custom window'}, n = {measured.n_labeled:,} labeled",
    )


class BaselineDiagramQuery(Query):
    """Which of a contract's baseline readings to draw."""

    split: choice("fit", "eval") = "eval"  # type: ignore[valid-type]
    which: choice("calibrated", "uncalibrated") = "calibrated"  # type: ignore[valid-type]


@_diagram("/v1/contracts/<contract_id>/reliability.svg", "contractDiagram", BaselineDiagramQuery)
def contract_svg(contract_id: str) -> Response:
    """A contract's baseline reliability diagram (SVG).

    A contract's baseline diagram: ``split`` fit|eval, ``which`` calibrated|uncalibrated.
    """
    query = BaselineDiagramQuery.parse()
    split, which = query.split, query.which
    contract = contracts_service.find_contract(db_session(), contract_id)
    reading = contract.baseline_reading(split, which)
    return _reliability_svg(
        reading.bins,
        f"{contract.model} v{contract.version}: {split} set, {which}",
        f"n = {reading.n:,}",
    )


@_diagram("/v1/models/<model>/history.svg", "historyDiagram", HistoryRangeQuery)
def history_svg(model: str) -> Response:
    """The ECE-over-time chart (SVG) of a cohort slice: the history's steps with the debiased ECE
    and its 95% interval, the policy and baseline lines, statuses and label coverage.

    The ECE-over-time chart of a cohort slice (the history's parameters but ``format``; without
    ``start`` the chart spans the slice's data, at most 7 days, in a step fitted to it unless
    ``step`` is given).
    """
    now = utcnow()
    query = HistoryRangeQuery.parse(now)
    slice_, (start, end, step) = query.slice(), query.range(now)
    if not query.given("start"):
        start, fitted_step = histories.fitted_range(
            db_session(), model, slice_, end, pages.FIT_LONGEST
        )
        step = step if query.given("step") else fitted_step
    fold.fold_for_read(db_session(), model, now)
    found = histories.model_history(db_session(), model, slice_, start, end, step, now)
    return _svg(render_history(found, title=f"{model}: ECE over time"))
