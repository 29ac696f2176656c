"""The review pages, for people who would rather look.

``/ui`` the fleet (models worst first, 50 a page, their slices in alert or warn and since when),
``/ui/models/{model}`` a model's reading, diagrams, history chart and class-wise reliability,
``/ui/contracts/{id}`` a contract, ``/ui/gate/{id}`` one gate decision with its audit hashes (the
SVG diagrams the API serves are ``service.web.routes.diagrams``); ``/`` redirects to ``/ui``. Each
handler parses, makes one call (a page builder of ``service.web.ui_models`` or a use case) and
renders. Server-rendered HTML with inline SVG, one stylesheet (``/ui/calmon.css``), no JavaScript.
Every response of this blueprint (and of the diagrams') carries a Content-Security-Policy that
allows nothing but this origin's stylesheet and forms (``frame-ancestors 'none'``),
``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
no-referrer``.

Signing in stores a session (``service.auth.service.open_ui_session``) and sets a cookie holding
its random id; links carry their path segments and query values percent-encoded. Signing in and
out are refused (403) when another site sent the form (``cross_site``): a page elsewhere could
otherwise sign a reader's browser in with its own token, or out.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from flask import (
    Blueprint,
    Response,
    current_app,
    make_response,
    redirect,
    render_template,
    request,
)
from werkzeug.urls import iri_to_uri
from werkzeug.wrappers import Response as BaseResponse

from service.auth.tokens import Permission, Principal
from service.common.clock import utcnow
from service.common.errors import (
    CalmonError,
    Conflict,
    ErrorDetail,
    NotFound,
    UnreadableContract,
    ValidationFailed,
)
from service.web import ui_models as pages
from service.web.auth import (
    LEGACY_TOKEN_COOKIE,
    SESSION_COOKIE,
    authenticate,
    close_session,
    open_session,
)
from service.web.db_session import db_session
from service.web.http_errors import ApiError
from service.web.operations import SVG
from service.web.queries import TextParam
from service.web.routes.stream import WindowQuery

bp = Blueprint("ui", __name__)

PAGE_CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SVG_CSP = "default-src 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
_COOKIE_FLAGS: dict[str, Any] = {
    "httponly": True,
    "secure": True,
    "samesite": "Strict",
    "path": "/",
}
#: A sign-in ``next`` is a path of the review pages: ``/ui``, ``/ui/...`` or ``/ui?...``.
_NEXT = re.compile(r"^/ui(?:[/?][^\\\x00-\x1f\x7f]*)?$")
_MAX_NEXT = 2000


@bp.after_request
def security_headers(response: Response) -> Response:
    """Frame, sniffing and referrer protection on every page, diagram and error."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if "Content-Security-Policy" not in response.headers:
        svg = response.mimetype == SVG
        response.headers["Content-Security-Policy"] = SVG_CSP if svg else PAGE_CSP
    return response


@bp.app_template_filter("segment")
def _segment(value: Any) -> str:
    """A value as one percent-encoded URL path segment."""
    return quote(str(value), safe="")


@bp.app_template_filter("significant")
def _significant(value: Any) -> Any:
    """``value`` with every float in it (inside lists and objects too) rounded to 4 significant
    digits, for the gate page's observed values and thresholds."""
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else value
    if isinstance(value, list):
        return [_significant(v) for v in value]
    if isinstance(value, dict):
        return {k: _significant(v) for k, v in value.items()}
    return value


@bp.app_template_filter("age")
def _age(then: datetime, now: datetime) -> str:
    """How long before ``now`` a time lies, in its two largest units (``3 h 5 min``)."""
    seconds = max(int((now - then).total_seconds()), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "min"), (seconds, "s")]
    first = next((i for i, (value, _) in enumerate(units) if value), len(units) - 1)
    return " ".join(f"{value} {unit}" for value, unit in units[first : first + 2] if value) or "0 s"


def safe_next(value: str | None) -> str:
    """Where to go after signing in: ``value`` if it is a review-page path of this site
    (percent-encoded for the Location header), else ``/ui``. Never another site, never a
    header break."""
    if not value or len(value) > _MAX_NEXT or not _NEXT.match(value):
        return "/ui"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or value.startswith("//"):
        return "/ui"
    if {".", ".."} & set(unquote(parts.path).split("/")):
        return "/ui"
    return iri_to_uri(value)


#: ``Sec-Fetch-Site`` values of a request this site's own page (or the user, typing) started.
_OWN_FETCH_SITES = frozenset({"same-origin", "none"})


def cross_site() -> str | None:
    """Why the current request must be taken for another site's (a reason), or None.

    Every browser in use sends ``Sec-Fetch-Site`` (Fetch Metadata), and only ``same-origin``
    (this site's page) or ``none`` (the user, typing or from a bookmark) is this site's own;
    ``same-site`` is a sibling subdomain, which may be someone else's. A browser without it
    sends ``Origin`` on every cross-origin POST, which must then name this host; ``null`` (an
    opaque origin: a sandboxed frame, a ``data:`` page) is refused. A request with neither
    header comes from no browser (a script, curl), which holds no reader's cookie for a forged
    form to ride on, so it is let through like any client of the API.
    """
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        if fetch_site.strip().lower() in _OWN_FETCH_SITES:
            return None
        return f"the form was sent from another site (Sec-Fetch-Site: {fetch_site[:20]})"
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    if origin.strip() == "null" or urlsplit(origin.strip()).netloc.lower() != request.host.lower():
        return "the form was sent from another site (its Origin is not this one)"
    return None


def _refused_cross_site(reason: str) -> Response:
    return _page("ui/error.html", 403, heading="403", message=f"Refused: {reason}.")


def _sign_in_redirect() -> BaseResponse:
    """To the sign-in form, coming back here afterwards; a dead session's cookie is cleared."""
    query = request.query_string.decode("utf-8", "replace")
    here = request.path + (f"?{query}" if query else "")
    response = redirect("/ui/sign-in?" + urlencode({"next": safe_next(here)}, safe="/"), code=303)
    if request.cookies.get(SESSION_COOKIE):
        response.delete_cookie(SESSION_COOKIE, **_COOKIE_FLAGS)
    return response


def _page(template: str, status: int = 200, **context: Any) -> Response:
    response = make_response(render_template(template, **context), status)
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/ui/calmon.css")
def stylesheet() -> Response:
    """The pages' one stylesheet (a file, so the policy needs no inline styles)."""
    response = make_response(render_template("ui/calmon.css"))
    response.mimetype = "text/css"
    response.headers["Cache-Control"] = "public, max-age=3600"
    return response


def _viewer() -> Principal | BaseResponse:
    """The signed-in reader, or a redirect to the sign-in form."""
    try:
        principal = authenticate(allow_cookie=True)
    except ApiError:
        return _sign_in_redirect()
    if not principal.may(Permission.READ):
        return _page(
            "ui/error.html",
            403,
            principal=principal,
            heading="403",
            message=f"role '{principal.role}' may not read",
        )
    return principal


@bp.get("/ui/sign-in")
def sign_in_form() -> Response:
    """The sign-in form."""
    return _page("ui/sign_in.html", next=safe_next(request.args.get("next")))


@bp.post("/ui/sign-in")
def sign_in() -> BaseResponse:
    """Open a session for a token that may read; its id goes in an HttpOnly, Secure,
    SameSite=Strict cookie (the token itself is never kept by the browser). A form another
    site sent is refused (``cross_site``)."""
    if (reason := cross_site()) is not None:
        return _refused_cross_site(reason)
    token = request.form.get("token", "").strip()
    next_path = safe_next(request.form.get("next"))
    opened = open_session(token) if token and len(token) <= 200 else None
    if opened is None:
        return _page(
            "ui/sign_in.html", 401, next=next_path, error="That token is not valid for reading."
        )
    session_id, _principal = opened
    response = redirect(next_path, code=303)
    response.set_cookie(SESSION_COOKIE, session_id, **_COOKIE_FLAGS)
    response.delete_cookie(LEGACY_TOKEN_COOKIE, **_COOKIE_FLAGS)
    return response


@bp.post("/ui/sign-out")
def sign_out() -> BaseResponse:
    """End the session (server-side too) and clear its cookie, unless another site sent the
    form (``cross_site``)."""
    if (reason := cross_site()) is not None:
        return _refused_cross_site(reason)
    close_session()
    response = redirect("/ui/sign-in", code=303)
    response.delete_cookie(SESSION_COOKIE, **_COOKIE_FLAGS)
    return response


def _error_page(viewer: Principal, exc: CalmonError) -> Response:
    """A use case's refusal as a page: 404 for what does not exist, 409 for stored state that
    stands in the way (an unreadable contract), else 422."""
    status, heading = 422, "invalid request"
    if isinstance(exc, NotFound):
        status, heading = 404, "not found"
    elif isinstance(exc, UnreadableContract):
        status, heading = 409, "unreadable contract"
    elif isinstance(exc, Conflict):
        status, heading = 409, "conflict"
    return _page(
        "ui/error.html",
        status,
        principal=viewer,
        heading=heading,
        message=exc.message,
        details=[f"{d.field}: {d.message}" for d in exc.details],
    )


def _windows() -> list[str]:
    return list(current_app.config["CALMON_SETTINGS"].windows)


@bp.get("/")
def root() -> BaseResponse:
    """The service's root: the review pages begin at the fleet (``/ui``)."""
    return redirect("/ui", code=302)


@bp.get("/ui")
def models() -> BaseResponse:
    """The fleet, a page of models at a time: worst first, their slices in alert or warn and
    since when."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        page = pages.fleet_page(db_session(), _windows(), utcnow(), _page_number())
    except CalmonError as exc:
        return _error_page(viewer, exc)
    return _page("ui/models.html", principal=viewer, **pages.context(page))


def _page_number() -> int:
    """The ``page`` query value (1-based, default 1)."""
    raw = request.args.get("page", "1")
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise ValidationFailed("invalid page", [ErrorDetail("page", "must be 1 or more")])
    return int(raw)


class ModelPageQuery(WindowQuery):
    """A model page's window and slice, and the history chart's range."""

    range: TextParam = None


@bp.get("/ui/models/<model>")
def model_page(model: str) -> BaseResponse:
    """The active contract, the reading of a window and cohort, diagrams, the history chart,
    class-wise reliability, cohorts, decisions."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        now = utcnow()
        query = ModelPageQuery.parse(now)
        chosen = (query.window, query.start, query.end) != (None, None, None)
        slice_, window = query.slice(), query.reading_window(now) if chosen else None
        range_name = pages.chosen_range(query.range)
        page = pages.model_page(db_session(), model, slice_, window, range_name, _windows(), now)
    except CalmonError as exc:
        return _error_page(viewer, exc)
    return _page("ui/model.html", principal=viewer, **pages.context(page))


@bp.get("/ui/contracts/<contract_id>")
def contract_page(contract_id: str) -> BaseResponse:
    """One contract with its baseline diagrams and the class-wise reliability of its stream."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        page = pages.contract_page(db_session(), contract_id, _windows(), utcnow())
    except CalmonError as exc:
        return _error_page(viewer, exc)
    return _page("ui/contract.html", principal=viewer, **pages.context(page))


@bp.get("/ui/gate/<decision_id>")
def gate_page(decision_id: str) -> BaseResponse:
    """One gate decision: checks, policy, evidence, and its place on the audit chain."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        page = pages.gate_page(db_session(), decision_id)
    except CalmonError as exc:
        return _error_page(viewer, exc)
    return _page("ui/gate.html", principal=viewer, **pages.context(page))
