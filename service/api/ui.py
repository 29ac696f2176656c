"""The review page: the reliability diagram with its counts, for people who would rather look."""

from __future__ import annotations

from typing import Any

from flask import (
    Blueprint,
    Response,
    current_app,
    make_response,
    redirect,
    render_template,
    request,
)
from werkzeug.wrappers import Response as BaseResponse

from service import monitoring, operations
from service.api.auth import TOKEN_COOKIE, authenticate, requires, resolve_token
from service.api.errors import ApiError
from service.api.session import db_session
from service.api.stream import slice_and_window
from service.auth import Permission, Principal
from service.calibration import Reading, bins_inference, calibrator_from_dict
from service.cohorts import ALL
from service.contracts import Contract
from service.errors import CalmonError, NotFound
from service.reliability_svg import render
from service.storage import audit
from service.storage import contracts as contracts_store
from service.storage.gates import list_decisions

bp = Blueprint("ui", __name__)
SVG = "image/svg+xml"


def _calibrator_text(contract: Contract) -> str:
    calibrator = calibrator_from_dict(contract.spec.calibrator).to_dict()
    if calibrator["method"] == "temperature":
        return f"temperature T = {calibrator['temperature']:.4f}"
    if calibrator["method"] == "platt":
        return f"Platt a = {calibrator['slope']:.4f}, b = {calibrator['intercept']:.4f}"
    return "identity"


def _page(template: str, status: int = 200, **context: Any) -> Response:
    response = make_response(render_template(template, **context), status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'"
    )
    return response


def _viewer() -> Principal | BaseResponse:
    """The signed-in reader, or a redirect to the sign-in form."""
    try:
        principal = authenticate(allow_cookie=True)
    except ApiError:
        return redirect(f"/ui/sign-in?next={request.path}", code=303)
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
    next_path = request.args.get("next", "/ui")
    return _page("ui/sign_in.html", next=next_path if next_path.startswith("/ui") else "/ui")


@bp.post("/ui/sign-in")
def sign_in() -> BaseResponse:
    """Check the token and keep it in an HttpOnly, Secure, SameSite=Strict cookie."""
    token = request.form.get("token", "").strip()
    next_path = request.form.get("next", "/ui")
    next_path = next_path if next_path.startswith("/ui") else "/ui"
    principal = resolve_token(token) if token else None
    if principal is None or not principal.may(Permission.READ):
        return _page(
            "ui/sign_in.html", 401, next=next_path, error="That token is not valid for reading."
        )
    response = redirect(next_path, code=303)
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, secure=True, samesite="Strict", path="/"
    )
    return response


@bp.post("/ui/sign-out")
def sign_out() -> BaseResponse:
    """Forget the sign-in cookie."""
    response = redirect("/ui/sign-in", code=303)
    response.delete_cookie(TOKEN_COOKIE, path="/", secure=True, httponly=True, samesite="Strict")
    return response


@bp.get("/ui")
def models() -> BaseResponse:
    """Every model with a contract."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    return _page(
        "ui/models.html", principal=viewer, models=contracts_store.model_names(db_session())
    )


def _current_contract(model: str) -> Contract:
    session = db_session()
    contract = contracts_store.active_contract_at(
        session, model, operations.utcnow()
    ) or contracts_store.latest_contract(session, model)
    if contract is None:
        raise NotFound(f"unknown model {model!r}")
    return contract


@bp.get("/ui/models/<model>")
def model_page(model: str) -> BaseResponse:
    """The active contract, the reading of a window and cohort, diagrams, cohorts, decisions."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    try:
        contract = _current_contract(model)
        now = operations.utcnow()
        slice_, window = slice_and_window(now)
        reading = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    except CalmonError as exc:
        return _page(
            "ui/error.html",
            404 if isinstance(exc, NotFound) else 422,
            principal=viewer,
            heading="not found" if isinstance(exc, NotFound) else "invalid request",
            message=exc.message,
        )
    cohorts = [
        {**s, "query": "all" if s["cohort"] == ALL else s["cohort"].replace("=", ":", 1)}
        for s in monitoring.cohort_slices(db_session(), model)["slices"]
    ]
    settings = current_app.config["CALMON_SETTINGS"]
    window_name = window.name or "24h"
    windows = list(dict.fromkeys([*settings.windows, window_name]))
    subtitle = f"{reading['cohort']}, {window_name}, n = {reading['n_labeled']:,} labeled"
    return _page(
        "ui/model.html",
        principal=viewer,
        model=model,
        contract=contract,
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
        decisions=list_decisions(db_session(), model=model, limit=10),
        events=audit.list_events(db_session(), model=model, limit=20, newest_first=True),
    )


@bp.get("/ui/contracts/<contract_id>")
def contract_page(contract_id: str) -> BaseResponse:
    """One contract with its baseline diagrams."""
    viewer = _viewer()
    if not isinstance(viewer, Principal):
        return viewer
    contract = contracts_store.get_contract(db_session(), contract_id)
    if contract is None:
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
            stored = contract.spec.baseline[split][which]
            evidence = bins_inference(Reading.from_dict(stored).bins)
            diagrams.append(
                render(
                    stored["bins"],
                    title=f"{split} set, {which}",
                    subtitle=f"n = {stored['n']:,}, ECE debiased {evidence.debiased:.4f} "
                    f"[{evidence.lower:.4f}, {evidence.upper:.4f}], plug-in {stored['ece']:.4f}",
                )
            )
    return _page(
        "ui/contract.html",
        principal=viewer,
        contract=contract,
        diagrams=diagrams,
        calibrator_text=_calibrator_text(contract),
    )


def _svg(body: str) -> Response:
    return Response(body, content_type=SVG)


@bp.get("/v1/models/<model>/reliability.svg")
@requires(Permission.READ, allow_cookie=True)
def model_svg(model: str) -> Response:
    """The reliability diagram of a window and cohort (same parameters as the calibration)."""
    now = operations.utcnow()
    slice_, window = slice_and_window(now)
    reading = monitoring.calibration_reading(db_session(), model, window, slice_, now)
    return _svg(
        render(
            reading["bins"],
            title=f"{model}: reliability",
            subtitle=f"{reading['cohort']}, {window.name or 'custom window'}, "
            f"n = {reading['n_labeled']:,} labeled",
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
    contract = operations.find_contract(db_session(), contract_id)
    reading = contract.spec.baseline[split][which]
    return _svg(
        render(
            reading["bins"],
            title=f"{contract.model} v{contract.version}: {split} set, {which}",
            subtitle=f"n = {reading['n']:,}",
        )
    )
