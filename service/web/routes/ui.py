"""The review page: the reliability diagram with its counts, for people who would rather look.

Server-rendered HTML with inline SVG, one stylesheet (``/ui/calmon.css``), no JavaScript. Every
response of this blueprint carries a Content-Security-Policy that allows nothing but this
origin's stylesheet and forms (``frame-ancestors 'none'``), ``X-Frame-Options: DENY``,
``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``. Signing in stores a
session (``service.auth.service.open_ui_session``) and sets a cookie holding its random id;
links
carry their path segments and query values percent-encoded.
"""

from __future__ import annotations

import re
from dataclasses import asdict
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

from service.audit import service as audit_service
from service.auth.tokens import Permission, Principal
from service.calibration import bins_inference
from service.common.clock import utcnow
from service.common.errors import CalmonError, NotFound
from service.contracts import service as contracts_service
from service.contracts.model import Contract
from service.gate import service as gate_service
from service.stream import readings as monitoring
from service.stream.cohorts import ALL
from service.web.auth import (
    LEGACY_TOKEN_COOKIE,
    SESSION_COOKIE,
    authenticate,
    close_session,
    open_session,
    requires,
)
from service.web.db_session import db_session
from service.web.http_errors import ApiError
from service.web.routes.stream import slice_and_window
from service.web.svg import render

bp = Blueprint("ui", __name__)
SVG = "image/svg+xml"

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
def _security_headers(response: Response) -> Response:
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


def _sign_in_redirect() -> BaseResponse:
    """To the sign-in form, coming back here afterwards; a dead session's cookie is cleared."""
    query = request.query_string.decode("utf-8", "replace")
    here = request.path + (f"?{query}" if query else "")
    response = redirect("/ui/sign-in?" + urlencode({"next": safe_next(here)}, safe="/"), code=303)
    if request.cookies.get(SESSION_COOKIE):
        response.delete_cookie(SESSION_COOKIE, **_COOKIE_FLAGS)
    return response


def _calibrator_text(contract: Contract) -> str:
    calibrator = contract.calibrator.to_dict()
    if calibrator["method"] == "temperature":
        return f"temperature T = {calibrator['temperature']:.4f}"
    if calibrator["method"] == "platt":
        return f"Platt a = {calibrator['slope']:.4f}, b = {calibrator['intercept']:.4f}"
    return "identity"


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
    SameSite=Strict cookie (the token itself is never kept by the browser)."""
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
    """End the session (server-side too) and clear its cookie."""
    close_session()
    response = redirect("/ui/sign-in", code=303)
    response.delete_cookie(SESSION_COOKIE, **_COOKIE_FLAGS)
    return response


@bp.get("/ui")
def models() -> BaseResponse:
    """Every model with a contract."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    return _page(
        "ui/models.html", principal=viewer, models=contracts_service.model_names(db_session())
    )


@bp.get("/ui/models/<model>")
def model_page(model: str) -> BaseResponse:
    """The active contract, the reading of a window and cohort, diagrams, cohorts, decisions."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        now = utcnow()
        contract = contracts_service.current_contract(db_session(), model, now)
        slice_, window = slice_and_window(now)
        measured = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    except CalmonError as exc:
        return _page(
            "ui/error.html",
            404 if isinstance(exc, NotFound) else 422,
            principal=viewer,
            heading="not found" if isinstance(exc, NotFound) else "invalid request",
            message=exc.message,
        )
    cohorts = [
        {**asdict(s), "query": "all" if s.cohort == ALL else s.cohort.replace("=", ":", 1)}
        for s in monitoring.cohort_slices(db_session(), model)
    ]
    settings = current_app.config["CALMON_SETTINGS"]
    window_name = window.name or "24h"
    windows = list(dict.fromkeys([*settings.windows, window_name]))
    subtitle = f"{measured.cohort}, {window_name}, n = {measured.n_labeled:,} labeled"
    reading = measured.to_dict()
    return _page(
        "ui/model.html",
        principal=viewer,
        model=model,
        contract=contract,
        baseline_source=contracts_service.baseline_source(db_session(), contract),
        reading=reading,
        calibrator_text=_calibrator_text(contract),
        window=window_name,
        windows=windows,
        cohort_query="all" if slice_ == ALL else slice_.replace("=", ":", 1),
        cohort_options=[{"name": c["cohort"], "query": c["query"]} for c in cohorts]
        or [{"name": ALL, "query": "all"}],
        cohorts=cohorts,
        now_svg=render(reading["bins"], title="Reliability now", subtitle=subtitle),
        baseline_svg=render(
            reading["baseline"]["bins"],
            title="Reliability at fit time",
            subtitle=f"held-out set, n = {reading['baseline']['n']:,}",
        ),
        decisions=gate_service.list_decisions(db_session(), model=model, limit=10),
        events=audit_service.list_events(db_session(), model=model, limit=20, newest_first=True),
    )


@bp.get("/ui/contracts/<contract_id>")
def contract_page(contract_id: str) -> BaseResponse:
    """One contract with its baseline diagrams."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        contract = contracts_service.find_contract(db_session(), contract_id)
    except NotFound:
        return _page(
            "ui/error.html",
            404,
            principal=viewer,
            heading="not found",
            message=f"no contract with id {contract_id!r}",
        )
    diagrams = []
    for split in ("eval", "fit"):
        for which in ("calibrated", "uncalibrated"):
            reading = contract.baseline_reading(split, which)
            evidence = bins_inference(reading.bins)
            diagrams.append(
                render(
                    reading.to_dict()["bins"],
                    title=f"{split} set, {which}",
                    subtitle=f"n = {reading.n:,}, ECE debiased {evidence.debiased:.4f} "
                    f"[{evidence.lower:.4f}, {evidence.upper:.4f}], plug-in {reading.ece:.4f}",
                )
            )
    return _page(
        "ui/contract.html",
        principal=viewer,
        contract=contract,
        baseline_source=contracts_service.baseline_source(db_session(), contract),
        diagrams=diagrams,
        calibrator_text=_calibrator_text(contract),
    )


def _svg(body: str) -> Response:
    return Response(body, content_type=SVG)


@bp.get("/v1/models/<model>/reliability.svg")
@requires(Permission.READ, allow_cookie=True)
def model_svg(model: str) -> Response:
    """The reliability diagram of a window and cohort (same parameters as the calibration)."""
    now = utcnow()
    slice_, window = slice_and_window(now)
    measured = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    return _svg(
        render(
            measured.to_dict()["bins"],
            title=f"{model}: reliability",
            subtitle=f"{measured.cohort}, {window.name or 'custom window'}, "
            f"n = {measured.n_labeled:,} labeled",
        )
    )


@bp.get("/v1/contracts/<contract_id>/reliability.svg")
@requires(Permission.READ, allow_cookie=True)
def contract_svg(contract_id: str) -> Response:
    """A contract's baseline diagram: ``split`` fit|eval, ``which`` calibrated|uncalibrated."""
    split = request.args.get("split", "eval")
    which = request.args.get("which", "calibrated")
    if split not in ("fit", "eval") or which not in ("calibrated", "uncalibrated"):
        raise ApiError(
            422,
            "split is fit or eval; which is calibrated or uncalibrated",
            details=[
                {
                    "field": "split" if split not in ("fit", "eval") else "which",
                    "message": "unknown value",
                }
            ],
        )
    contract = contracts_service.find_contract(db_session(), contract_id)
    reading = contract.baseline_reading(split, which)
    return _svg(
        render(
            reading.to_dict()["bins"],
            title=f"{contract.model} v{contract.version}: {split} set, {which}",
            subtitle=f"n = {reading.n:,}",
        )
    )
