"""Page models of the review pages: typed dataclasses built by one call each, then rendered.

Each builder reads through the capabilities' use cases (never a store directly) and returns
everything its template shows, SVG included; the handlers in ``routes/ui.py`` parse the request,
call one builder and render. Times are UTC; ECE values are fractions in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from service.audit import service as audit_service
from service.audit.store import AuditEvent
from service.calibration import bins_inference
from service.calibration.drift import StatusLevels
from service.calibration.readings import ReliabilityBin
from service.calibration.vocabulary import Status
from service.common.errors import ErrorDetail, UnreadableContract, ValidationFailed
from service.common.values import format_timestamp
from service.contracts import service as contracts_service
from service.contracts.model import BaselineSource, Contract
from service.export.budget import SliceExport
from service.export.fleet import Fleet, fleet_overview, slice_export
from service.gate import record as gate_record
from service.gate import service as gate_service
from service.gate.record import DecisionRecord
from service.gate.store import GateDecision
from service.stream import fold, monitoring
from service.stream import history as histories
from service.stream.classwise import ClasswiseReading, classwise_reading
from service.stream.cohorts import ALL
from service.stream.replies import Calibration
from service.stream.windows import Window, parse_duration
from service.web.history_svg import render_history
from service.web.reliability_svg import SMALL, render

#: The model page's history ranges and the step each is drawn in; ``fit`` spans the slice's data
#: (at most ``FIT_LONGEST``) in a step chosen for it (``history.fitted_range``).
FIT_RANGE = "fit"
FIT_LONGEST = timedelta(days=7)
HISTORY_RANGES: dict[str, timedelta | None] = {
    FIT_RANGE: None,
    "24h": timedelta(hours=1),
    "7d": timedelta(hours=1),
    "30d": timedelta(hours=6),
}
DEFAULT_RANGE = FIT_RANGE
#: At most this many class-wise diagrams (the classes with the largest class-wise ECE); the
#: table beside them lists every class.
MAX_CLASS_DIAGRAMS = 12


def context(page: Any) -> dict[str, Any]:
    """A page model's fields as template variables (shallow: objects stay objects)."""
    return {f.name: getattr(page, f.name) for f in fields(page)}


def chosen_range(name: str | None) -> str:
    """The ``range`` query value, checked (default ``DEFAULT_RANGE``)."""
    chosen = name or DEFAULT_RANGE
    if chosen not in HISTORY_RANGES:
        raise ValidationFailed(
            "invalid range", [ErrorDetail("range", f"one of {', '.join(HISTORY_RANGES)}")]
        )
    return chosen


def span_text(span: timedelta) -> str:
    """A history's length as its title says it: whole days from 2 days on, else hours and
    minutes (``7d``, ``12h``, ``1h 30min``)."""
    minutes = int(span.total_seconds() // 60)
    if minutes >= 2 * 24 * 60 and minutes % (24 * 60) == 0:
        return f"{minutes // (24 * 60)}d"
    hours, minutes = divmod(minutes, 60)
    return (
        " ".join(t for t in (f"{hours}h" if hours else "", f"{minutes}min" if minutes else "") if t)
        or "0min"
    )


def calibrator_text(contract: Contract) -> str:
    """The calibrator in a few words, with its fitted parameters."""
    calibrator = contract.calibrator.to_dict()
    if calibrator["method"] == "temperature":
        return f"temperature T = {calibrator['temperature']:.4f}"
    if calibrator["method"] == "platt":
        return f"Platt a = {calibrator['slope']:.4f}, b = {calibrator['intercept']:.4f}"
    if calibrator["method"] == "beta":
        return (
            f"beta a = {calibrator['a']:.4f}, b = {calibrator['b']:.4f}, c = {calibrator['c']:.4f}"
        )
    if calibrator["method"] == "isotonic" and "x" in calibrator:
        return f"isotonic, {len(calibrator['x'])} thresholds"
    if calibrator["method"] == "isotonic":
        return f"isotonic one-vs-rest, {len(calibrator['per_class'])} classes"
    if calibrator["method"] == "histogram":
        return f"histogram binning, {len(calibrator['values'])} bins"
    if calibrator["method"] in ("vector", "matrix"):
        return f"{calibrator['method']} scaling, K = {len(calibrator['bias'])}"
    return "identity"


def _number(value: float, default: float) -> float:
    return default if math.isnan(value) else value


def _cohort_query(slice_: str) -> str:
    """A slice as the page's ``cohort`` query value: its name (``all`` or ``key=value``)."""
    return slice_


@dataclass(frozen=True)
class ClassDiagram:
    """One class's small reliability diagram and its row of the class table."""

    name: str
    support: int
    ece: float | None
    n_bins: int
    svg: str | None


@dataclass(frozen=True)
class ClasswiseSection:
    """Every class of a multiclass window, worst class-wise ECE first; ``svg`` for at most
    ``MAX_CLASS_DIAGRAMS`` of them."""

    n: int
    window: str
    cohort: str
    classes: tuple[ClassDiagram, ...]


def classwise_section(found: ClasswiseReading | None, window: str) -> ClasswiseSection | None:
    """The class-wise diagrams and table of a window (None for a binary contract)."""
    if found is None:
        return None
    ranked = sorted(found.classes, key=lambda c: -_number(c.reliability.ece, 0.0))
    out = []
    for i, curve in enumerate(ranked):
        r = curve.reliability
        ece = None if math.isnan(r.ece) else r.ece
        svg = None
        if i < MAX_CLASS_DIAGRAMS:
            svg = render(
                r.bins,
                title=f"class {curve.name}",
                subtitle=f"true in {r.support:,} of {r.n:,} · ECE "
                + ("n/a" if ece is None else f"{ece:.4f}"),
                y_label=f"frequency of {curve.name}",
                x_label=f"predicted P({curve.name})",
                frame=SMALL,
            )
        out.append(ClassDiagram(curve.name, r.support, ece, len(r.bins), svg))
    return ClasswiseSection(found.n, window, found.cohort, tuple(out))


@dataclass(frozen=True)
class ModelPage:
    """``/ui/models/{model}``: the reading of a window and cohort, its diagrams, the history
    chart of the cohort over ``history_range``, class-wise reliability, cohorts (and which
    of them are exported to Prometheus: ``export``, None before the first refresh),
    decisions."""

    model: str
    contract: Contract
    baseline_source: BaselineSource
    reading: dict[str, Any]
    calibrator_text: str
    window: str
    windows: list[str]
    cohort_query: str
    cohort_options: list[dict[str, str]]
    cohorts: list[dict[str, Any]]
    now_svg: str
    baseline_svg: str
    history_range: str
    history_ranges: list[str]
    history_span: str
    history_svg: str
    history_query: str
    classwise: ClasswiseSection | None
    decisions: list[GateDecision]
    events: list[AuditEvent]
    export: SliceExport | None
    status_reasons: list[tuple[str, str]] = field(default_factory=list)
    window_note: str | None = None


def plain_status(contract: Contract, status: str, n_labeled: int) -> str:
    """What a status means in plain words, against ``contract``'s policy and baseline (the
    levels of ``drift.StatusLevels``): the words a reason begins with."""
    policy = contract.policy
    try:
        levels = StatusLevels.of(policy, bins_inference(contract.baseline_reading().bins))
    except UnreadableContract:
        levels = StatusLevels(policy.max_ece, policy.max_ece / 2, math.nan)
    if status == Status.ALERT:
        if math.isclose(levels.alert, policy.max_ece):
            return f"ECE above the contract's {policy.max_ece:g}"
        return (
            f"ECE above {levels.alert:.3f}, the held-out baseline's upper bound plus the "
            f"contract's allowed increase of {policy.max_ece_increase:g}"
        )
    if status == Status.WARN:
        if math.isclose(levels.warn, policy.max_ece / 2):
            return f"ECE above {levels.warn:.3g}, half the contract's {policy.max_ece:g}"
        return (
            f"ECE above {levels.warn:.3f}, the held-out baseline's upper bound plus half the "
            f"contract's allowed increase"
        )
    if status == Status.INSUFFICIENT_DATA and n_labeled < max(policy.min_labeled, 1):
        return (
            f"Too few labels to judge: {n_labeled:,}, the contract asks for {policy.min_labeled:,}"
        )
    if status == Status.INSUFFICIENT_DATA:
        return f"Too few labels yet to rule out an ECE of {2 * levels.alert:.3g}"
    return f"ECE within the contract's {policy.max_ece:g}"


def plain_reasons(
    contract: Contract, status: str, n_labeled: int, reasons: Sequence[str]
) -> list[tuple[str, str]]:
    """The status's reasons, each as (plain words, the statistics behind them): the first
    leads with ``plain_status``."""
    first = plain_status(contract, status, n_labeled)
    details = list(reasons)
    return [(first, details[0] if details else "")] + [("", d) for d in details[1:]]


def _opening_window(
    session: Session, model: str, slice_: str, names: Sequence[str], now: datetime
) -> tuple[monitoring.WindowReading, str | None]:
    """The reading a model page opens on: the shortest of ``names`` whose window holds data of
    the slice: enough labels for a status if one does, else labeled predictions, else any
    predictions; when none does, the 24h one (or the shortest) and a note saying where the
    slice's data is."""
    ordered = sorted(names, key=parse_duration)
    wanted = [(slice_, Window.trailing(name, now)) for name in ordered]
    readings = monitoring.calibration_readings(session, model, wanted, now)
    for holds in (
        lambda r: r.drift.status != Status.INSUFFICIENT_DATA,
        lambda r: r.n_labeled > 0,
        lambda r: r.n_predictions > 0,
    ):
        found = next((r for r in readings if holds(r)), None)
        if found is not None:
            return found, None
    fallback = readings[ordered.index("24h")] if "24h" in ordered else readings[0]
    first = histories.first_data(session, model, slice_)
    if first is None:
        return fallback, f"No prediction of {slice_} has been received yet."
    return fallback, (
        f"No prediction of {slice_} in the last {ordered[-1]}: its data begins "
        f"{format_timestamp(first)}; read it with a start and end, e.g. "
        f"?start={format_timestamp(first)}&end={format_timestamp(first + timedelta(days=1))}."
    )


def model_page(
    session: Session,
    model: str,
    slice_: str,
    window: Window | None,
    range_name: str,
    settings_windows: Sequence[str],
    now: datetime,
) -> ModelPage:
    """Build the model page (``NotFound`` for an unknown model); without a ``window`` it opens on
    the shortest configured window that holds data (``_opening_window``). The model's waiting
    labels are folded first as for its API readings (``fold.fold_for_read``)."""
    contract = contracts_service.current_contract(session, model, now)
    fold.fold_for_read(session, model, now)
    window_note = None
    if window is None:
        measured, window_note = _opening_window(session, model, slice_, settings_windows, now)
        window = measured.window
    else:
        measured = monitoring.calibration_reading(session, model, window, slice_, now)
    cohorts: list[dict[str, Any]] = [
        {"cohort": s.cohort, "n_predictions": s.n_predictions, "n_labeled": s.n_labeled}
        | {"query": _cohort_query(s.cohort)}
        for s in monitoring.cohort_slices(session, model)
    ]
    window_name = window.name or "24h"
    reading = Calibration.model_validate(measured).model_dump(mode="json", exclude_unset=True)
    subtitle = f"{measured.cohort}, {window_name}, n = {measured.n_labeled:,} labeled"
    step = HISTORY_RANGES[range_name]
    if step is None:
        start, step = histories.fitted_range(session, model, slice_, now, FIT_LONGEST)
    else:
        start = now - parse_duration(range_name)
    found = histories.model_history(session, model, slice_, start, now, step, now)
    status_window = window.name or "24h"
    found = replace(
        found,
        status_window=status_window,
        window_statuses=histories.window_statuses(session, found, status_window, now),
    )
    span = span_text(now - start)
    minutes = int(step.total_seconds() // 60)
    return ModelPage(
        model=model,
        contract=contract,
        baseline_source=contracts_service.baseline_source(session, contract),
        reading=reading,
        calibrator_text=calibrator_text(contract),
        window=window_name,
        windows=list(dict.fromkeys([*settings_windows, window_name])),
        cohort_query=_cohort_query(slice_),
        cohort_options=[{"name": c["cohort"], "query": c["query"]} for c in cohorts]
        or [{"name": ALL, "query": "all"}],
        cohorts=cohorts,
        now_svg=render(measured.reading.bins, title="Reliability now", subtitle=subtitle),
        baseline_svg=render(
            measured.baseline.bins,
            title="Reliability at fit time",
            subtitle=f"held-out set, n = {measured.baseline.n:,}",
        ),
        history_range=range_name,
        history_ranges=list(HISTORY_RANGES),
        history_span=span,
        history_svg=render_history(found, title=f"ECE over the last {span}"),
        history_query=urlencode(
            {
                "cohort": _cohort_query(slice_),
                "start": format_timestamp(found.start),
                "end": format_timestamp(found.end),
                "step": f"{minutes}m",
            }
        ),
        classwise=classwise_section(
            classwise_reading(session, measured.contract, window, slice_), window_name
        ),
        decisions=gate_service.list_decisions(session, model=model, limit=10),
        events=audit_service.list_events(session, model=model, limit=20, newest_first=True),
        export=slice_export(session, model),
        status_reasons=plain_reasons(
            measured.contract, measured.drift.status, measured.n_labeled, measured.drift.reasons
        ),
        window_note=window_note,
    )


@dataclass(frozen=True)
class ContractPage:
    """``/ui/contracts/{id}``: the contract, its four baseline diagrams and, for a multiclass
    contract, the class-wise reliability of its own predictions in a trailing window (the
    stored baseline keeps top-label bins only)."""

    contract: Contract
    baseline_source: BaselineSource
    diagrams: list[str]
    calibrator_text: str
    classwise: ClasswiseSection | None


def contract_page(
    session: Session, contract_id: str, windows: Sequence[str], now: datetime
) -> ContractPage:
    """Build the contract page (``NotFound`` for an unknown id); the class-wise reliability is
    of the longest of ``windows``."""
    classwise_window = max(windows, key=parse_duration)
    contract = contracts_service.find_contract(session, contract_id)
    diagrams = []
    for split in ("eval", "fit"):
        for which in ("calibrated", "uncalibrated"):
            reading = contract.baseline_reading(split, which)
            evidence = bins_inference(reading.bins)
            diagrams.append(
                render(
                    reading.bins,
                    title=f"{split} set, {which}",
                    subtitle=f"n = {reading.n:,}, ECE debiased {evidence.debiased:.4f} "
                    f"[{evidence.lower:.4f}, {evidence.upper:.4f}], plug-in {reading.ece:.4f}",
                )
            )
    window = Window.trailing(classwise_window, now)
    return ContractPage(
        contract=contract,
        baseline_source=contracts_service.baseline_source(session, contract),
        diagrams=diagrams,
        calibrator_text=calibrator_text(contract),
        classwise=classwise_section(
            classwise_reading(session, contract, window, ALL), classwise_window
        ),
    )


@dataclass(frozen=True)
class GatePage:
    """``/ui/gate/{decision_id}``: one decision, its checks, policy and evidence (diagram and
    table), and the digests and audit event that tie it to the hash chain."""

    record: DecisionRecord
    contract: Contract
    evidence_svg: str
    policy_items: list[tuple[str, Any]]


def gate_page(session: Session, decision_id: str) -> GatePage:
    """Build the decision page (``NotFound`` for an unknown id)."""
    record = gate_record.decision_record(session, decision_id)
    decision = record.decision
    evidence = decision.evidence
    ci = evidence.get("ece_ci") or [None, None]
    debiased = evidence.get("ece_debiased")
    subtitle = f"n = {evidence.get('n', 0):,}" + (
        ""
        if debiased is None or None in ci
        else f", ECE debiased {debiased:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"
    )
    return GatePage(
        record=record,
        contract=contracts_service.find_contract(session, decision.contract_id),
        evidence_svg=render(
            _evidence_bins(evidence.get("reliability") or []),
            title="Evidence: reliability",
            subtitle=subtitle,
        ),
        policy_items=sorted(decision.policy.items()),
    )


def _evidence_bins(stored: list[dict[str, Any]]) -> list[ReliabilityBin]:
    """A stored gate evidence's ``reliability`` (bins as the evidence document writes them)."""
    return [
        ReliabilityBin(
            lo=b["lo"],
            hi=b["hi"],
            n=b["n"],
            mean_confidence=b["mean_confidence"],
            accuracy=b["accuracy"],
            ci_lower=b["ci"][0],
            ci_upper=b["ci"][1],
        )
        for b in stored
    ]


@dataclass(frozen=True)
class FleetPage:
    """``/ui``: a page of models worst first with their state and latest gate decision, and
    the window whose ``all`` slice gives the model's labeled and unlabeled counts."""

    fleet: Fleet
    decisions: dict[str, GateDecision]
    count_window: str
    now: datetime
    unreadable: dict[str, str] = field(default_factory=dict)
    #: ``(model, cohort, window)``: what a slice row's status means in plain words.
    plain: dict[tuple[str, str, str], str] = field(default_factory=dict)


def fleet_page(session: Session, windows: Sequence[str], now: datetime, page: int = 1) -> FleetPage:
    """Build one page of the fleet overview from the stored readings; ``unreadable`` flags the
    page's models whose current contract cannot be read back (``{model: why}``), which are
    listed as the others are."""
    fleet = fleet_overview(session, windows, now, page)
    problems = contracts_service.unreadable_among(session, [m.contract.id for m in fleet.models])
    plain: dict[tuple[str, str, str], str] = {}
    for m in fleet.models:
        if m.attention and m.contract.id not in problems:
            contract = contracts_service.find_contract(session, m.contract.id)
            for a in m.attention:
                plain[(m.model, a.cohort, a.window)] = plain_status(contract, a.status, a.n_labeled)
    return FleetPage(
        fleet=fleet,
        decisions=gate_record.latest_decisions(session, [m.model for m in fleet.models]),
        count_window="24h" if "24h" in windows else windows[0],
        now=now,
        unreadable={
            m.model: problems[m.contract.id] for m in fleet.models if m.contract.id in problems
        },
        plain=plain,
    )
