"""The ECE-over-time chart as SVG: one column per step of a ``History``, server-rendered.

Top panel: per step with labels, the debiased ECE (a point) inside its 95% interval (a band
segment as wide as the step), the plug-in ECE faint beside it, lines joining consecutive labeled
steps only (a step without labels is a gap), the policy's ``max_ece`` and the baseline's
debiased ECE as horizontal rules, and a dashed mark where the contract version changes. A step
with fewer labels than the policy's ``min_labeled`` is drawn hollow (its estimate is too rough
to judge) and sets no part of the ECE axis. Beneath it a strip of each step's status: with the
history's ``window_statuses``, the status of the trailing window at the step's end (what the
service said then), else the step's own; a triangle marks where it changes between judged
statuses (``ok``, ``warn``, ``alert``: ``insufficient_data`` changes nothing). Then the
label-coverage panel: per step, the predictions as an outline and the labeled ones as a filled
bar inside it (a distinct fill below 50% coverage).

The ECE axis runs from 0 to a round value above the policy line, the baseline, every judged
point estimate and most of their interval bounds (``_ece_top``), at most 1; an interval or a
hollow point reaching above it is drawn at the top (its tooltip holds the numbers). Times are
UTC; a step ``[start, start + step)`` is drawn over its whole width.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from flask import render_template

from service.calibration.vocabulary import Status
from service.common.errors import UnreadableContract
from service.stream.history import History, HistoryPoint

LEFT, PLOT_W, RIGHT = 64, 720, 24
TOP, PLOT_H = 48, 220
STRIP_GAP, STRIP_H = 6, 10
COVER_GAP, COVER_H = 44, 80
LEGEND_GAP = 44
WIDTH = LEFT + PLOT_W + RIGHT
STRIP_TOP = TOP + PLOT_H + STRIP_GAP
COVER_TOP = STRIP_TOP + STRIP_H + COVER_GAP
LEGEND_TOP = COVER_TOP + COVER_H + LEGEND_GAP
HEIGHT = LEGEND_TOP + 58
#: Below this share of labeled predictions a step's coverage bar gets the "mostly unlabeled" fill.
LOW_COVERAGE = 0.5
#: The statuses a change is marked between (a step with too few labels changes nothing).
JUDGED = (Status.OK, Status.WARN, Status.ALERT)
_NICE = (1.0, 2.0, 2.5, 5.0)
_TICK_SPACINGS = tuple(
    timedelta(hours=h) for h in (1, 2, 3, 6, 12, 24, 48, 24 * 7, 24 * 14, 24 * 30, 24 * 90)
)


@dataclass(frozen=True)
class StepMark:
    """A labeled step in pixels: its column, its interval band, its points and tooltip."""

    start: str
    x: float
    width: float
    cx: float
    band_top: float
    band_height: float
    point_y: float
    plugin_y: float | None
    status: str
    title: str
    hollow: bool = False


@dataclass(frozen=True)
class CoverageBar:
    """A step with predictions: the outline of all of them and the fill of the labeled ones."""

    x: float
    width: float
    outline_top: float
    outline_height: float
    fill_top: float
    fill_height: float
    low: bool
    title: str


@dataclass(frozen=True)
class StatusCell:
    """A step's status as a coloured cell of the strip under the ECE panel."""

    x: float
    width: float
    status: str
    title: str


@dataclass(frozen=True)
class Marker:
    """A vertical mark at ``x`` (a status change or a new contract version)."""

    x: float
    label: str
    title: str


@dataclass(frozen=True)
class Rule:
    """A horizontal line across the ECE panel at ``y`` for ``value``."""

    y: float
    value: float
    label: str


@dataclass(frozen=True)
class Tick:
    """An axis tick at pixel ``at`` with its label."""

    at: float
    label: str


@dataclass(frozen=True)
class HistoryChart:
    """Everything the template draws, in pixels (y grows downwards), with the texts."""

    title: str
    subtitle: str
    summary: str
    status_window: str | None
    marks: tuple[StepMark, ...]
    ece_lines: tuple[str, ...]
    plugin_lines: tuple[str, ...]
    coverage: tuple[CoverageBar, ...]
    strip: tuple[StatusCell, ...]
    status_changes: tuple[Marker, ...]
    versions: tuple[Marker, ...]
    max_ece: Rule | None
    baseline: Rule | None
    baseline_label_y: float
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    count_ticks: tuple[Tick, ...]


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(value))
    return next(f * power for f in (*_NICE, 10.0) if f * power >= value * (1 - 1e-12))


def _stamp(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _step_text(step: timedelta) -> str:
    minutes = int(step.total_seconds() // 60)
    if minutes % 1440 == 0:
        return f"{minutes // 1440}-day"
    return f"{minutes // 60}-hour" if minutes % 60 == 0 else f"{minutes}-minute"


def _labeled(p: HistoryPoint) -> bool:
    return p.n_labeled > 0 and p.ece_debiased is not None and p.ece_ci is not None


def _point_title(p: HistoryPoint, step: timedelta) -> str:
    span = f"{_stamp(p.start)} to {_stamp(p.start + step)[11:]} UTC"
    coverage = f"{p.label_coverage:.0%}" if p.label_coverage is not None else "n/a"
    counts = f"{p.n_labeled:,} labeled of {p.n_predictions:,} predictions ({coverage} coverage)"
    if not _labeled(p):
        return f"{span}: {counts}; no ECE without labels; status {p.status.replace('_', ' ')}"
    assert p.ece_ci is not None and p.ece_debiased is not None
    plug_in = "n/a" if p.ece is None else f"{p.ece:.4f}"
    return (
        f"{span}, contract v{p.contract_version}: ECE debiased {p.ece_debiased:.4f} "
        f"(95% interval {p.ece_ci[0]:.4f} - {p.ece_ci[1]:.4f}), plug-in {plug_in}; {counts}; "
        f"status {p.status.replace('_', ' ')}"
    )


def _baseline(history: History) -> float | None:
    try:
        value = history.contract.baseline_reading().ece_debiased
    except UnreadableContract:
        return None
    return value if math.isfinite(value) else None


def _ece_top(
    points: Sequence[HistoryPoint], max_ece: float, baseline: float | None, min_labeled: int
) -> float:
    """The ECE axis's top: a round value above the policy line, the baseline, the estimates of
    the steps with at least ``min_labeled`` labels and most of their intervals (the 90th
    percentile of their upper bounds), at most 1. When no step has that many labels, a quarter
    above the 90th percentile of every labeled step's estimates stands in for them (their
    intervals are then wide, drawn to the top), so one step of a few labels never sets the
    axis."""
    labeled = [p for p in points if _labeled(p)]
    judged = [p for p in labeled if p.n_labeled >= min_labeled]
    estimates = [max(p.ece_debiased or 0.0, p.ece or 0.0) for p in judged or labeled]
    uppers = [p.ece_ci[1] if p.ece_ci is not None else 0.0 for p in judged]
    reach = [max_ece * 1.1, (baseline or 0.0) * 1.1, 0.01]
    if judged:
        reach += [max(estimates) * 1.1, float(np.quantile(uppers, 0.9))]
    elif estimates:
        reach.append(float(np.quantile(estimates, 0.9)) * 1.25)
    return min(_nice_ceiling(max(reach)), 1.0)


def _polyline(xy: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)


def _runs(indices: Sequence[int]) -> list[list[int]]:
    """Consecutive step indices grouped in runs (a gap starts a new run)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _time_ticks(start: datetime, end: datetime) -> tuple[Tick, ...]:
    """At most 8 ticks on round UTC times (hours, days or weeks apart)."""
    span = end - start
    spacing = next((s for s in _TICK_SPACINGS if span / s <= 8), _TICK_SPACINGS[-1])
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    t = epoch + -((epoch - start) // spacing) * spacing
    ticks = []
    while t <= end:
        daily = spacing >= timedelta(days=1) or (t.hour == 0 and t.minute == 0)
        label = t.strftime("%b %d") if daily else t.strftime("%H:%M")
        ticks.append(Tick(LEFT + (t - start) / span * PLOT_W, label))
        t += spacing
    return tuple(ticks)


def chart_of(history: History, *, title: str) -> HistoryChart:
    """Lay out ``history`` (its policy line and baseline from ``history.contract``)."""
    points, step = history.points, history.step
    n = max(len(points), 1)
    width = PLOT_W / n
    max_ece, min_labeled = history.policy.max_ece, history.policy.min_labeled
    baseline = _baseline(history)
    top = _ece_top(points, max_ece, baseline, min_labeled)
    statuses = _strip_statuses(history)

    def y(value: float) -> float:
        return TOP + (1.0 - min(max(value, 0.0), top) / top) * PLOT_H

    def cx(i: int) -> float:
        return LEFT + (i + 0.5) * width

    labeled = [i for i, p in enumerate(points) if _labeled(p)]
    marks = []
    for i in labeled:
        p = points[i]
        assert p.ece_ci is not None and p.ece_debiased is not None
        upper, lower = y(p.ece_ci[1]), y(p.ece_ci[0])
        marks.append(
            StepMark(
                start=p.start.isoformat(),
                x=LEFT + i * width,
                width=width,
                cx=cx(i),
                band_top=upper,
                band_height=max(lower - upper, 1.0),
                point_y=y(p.ece_debiased),
                plugin_y=None if p.ece is None else y(p.ece),
                status=p.status,
                title=_point_title(p, step)
                + (
                    f"; fewer labels than min_labeled {min_labeled}: too few to judge"
                    if p.n_labeled < min_labeled
                    else ""
                ),
                hollow=p.n_labeled < min_labeled,
            )
        )
    ece_lines, plugin_lines = [], []
    for run in _runs(labeled):
        if len(run) > 1:
            ece_lines.append(_polyline([(cx(i), y(points[i].ece_debiased or 0.0)) for i in run]))
            plugin_lines.append(_polyline([(cx(i), y(points[i].ece or 0.0)) for i in run]))
    tallest = max((p.n_predictions for p in points), default=0) or 1
    cover_base = COVER_TOP + COVER_H
    coverage = tuple(
        CoverageBar(
            x=LEFT + i * width + min(1.0, width * 0.1),
            width=max(width - 2 * min(1.0, width * 0.1), 0.5),
            outline_top=cover_base - COVER_H * p.n_predictions / tallest,
            outline_height=COVER_H * p.n_predictions / tallest,
            fill_top=cover_base - COVER_H * p.n_labeled / tallest,
            fill_height=COVER_H * p.n_labeled / tallest,
            low=(p.label_coverage or 0.0) < LOW_COVERAGE,
            title=_point_title(p, step),
        )
        for i, p in enumerate(points)
        if p.n_predictions
    )
    strip = tuple(
        StatusCell(LEFT + i * width, width, statuses[i], _cell_title(history, i))
        for i in range(len(points))
    )
    changes, versions = [], []
    candidates = labeled if history.window_statuses is None else range(len(points))
    judged = [i for i in candidates if statuses[i] in JUDGED]
    for before, after in itertools.pairwise(judged):
        old, new = statuses[before], statuses[after]
        if old != new:
            text = f"{old} → {new}"
            at = LEFT + after * width
            changes.append(Marker(at, text, f"status {text} at {_stamp(points[after].start)} UTC"))
    for before, after in itertools.pairwise(labeled):
        old_version, version = points[before].contract_version, points[after].contract_version
        if old_version != version:
            at, label = LEFT + after * width, f"v{version}"
            since = _stamp(points[after].start)
            versions.append(Marker(at, label, f"contract {label} from {since} UTC"))
    spacing = _nice_ceiling(top / 5)
    y_ticks = tuple(
        Tick(y(k * spacing), f"{k * spacing:.3g}") for k in range(int(top / spacing + 1e-9) + 1)
    )
    count_ticks = (
        Tick(cover_base, "0"),
        Tick(COVER_TOP, f"{tallest:,}" if any(p.n_predictions for p in points) else "—"),
    )
    return HistoryChart(
        title=title,
        subtitle=(
            f"{history.cohort}, {_stamp(history.start)} to {_stamp(history.end)} UTC in "
            f"{_step_text(step)} steps"
        ),
        summary=_summary(history, labeled, statuses, max_ece, baseline),
        status_window=history.status_window if history.window_statuses is not None else None,
        marks=tuple(marks),
        ece_lines=tuple(ece_lines),
        plugin_lines=tuple(plugin_lines),
        coverage=coverage,
        strip=strip,
        status_changes=tuple(changes),
        versions=tuple(versions),
        max_ece=Rule(y(max_ece), max_ece, f"policy max ECE {max_ece:.3f}")
        if max_ece <= top
        else None,
        baseline=None
        if baseline is None
        else Rule(y(baseline), baseline, f"baseline (held-out) {baseline:.3f}"),
        baseline_label_y=_label_y(y(baseline)) if baseline is not None else 0.0,
        y_ticks=y_ticks,
        x_ticks=_time_ticks(history.start, history.end),
        count_ticks=count_ticks,
    )


def _strip_statuses(history: History) -> list[str]:
    """Each step's status in the strip: the trailing window's at its end when the history has
    them, else the step's own."""
    if history.window_statuses is not None:
        return [str(s) for s in history.window_statuses]
    return [p.status for p in history.points]


def _cell_title(history: History, i: int) -> str:
    """A strip cell's tooltip: the window status at the step's end, then the step's numbers."""
    p = _point_title(history.points[i], history.step)
    if history.window_statuses is None:
        return p
    end = _stamp(history.points[i].start + history.step)
    status = str(history.window_statuses[i]).replace("_", " ")
    return f"{history.status_window} window ending {end} UTC: {status}. Step {p}"


def _label_y(line_y: float) -> float:
    """Where a rule's label goes: under the line, or over it when under would leave the plot
    (into the status strip)."""
    below = line_y + 13
    return below if below <= TOP + PLOT_H - 3 else line_y - 5


def _summary(
    history: History,
    labeled: Sequence[int],
    statuses: Sequence[str],
    max_ece: float,
    baseline: float | None,
) -> str:
    points = history.points
    parts = [
        f"Debiased ECE of {history.model}, {history.cohort}, per {_step_text(history.step)} "
        f"step from {_stamp(history.start)} to {_stamp(history.end)} UTC: "
        f"{len(labeled)} of {len(points)} steps have labels."
    ]
    if labeled:
        last = points[labeled[-1]]
        assert last.ece_ci is not None and last.ece_debiased is not None
        parts.append(
            f"Latest labeled step {_stamp(last.start)}: {last.ece_debiased:.3f} (95% interval "
            f"{last.ece_ci[0]:.3f} - {last.ece_ci[1]:.3f}), status {last.status.replace('_', ' ')}."
        )
    else:
        parts.append("No step in this range has labels.")
    alerts, warns = (sum(1 for t in statuses if t == s) for s in (Status.ALERT, Status.WARN))
    if history.window_statuses is None:
        parts.append(f"Steps in alert: {alerts}, in warn: {warns}.")
    else:
        parts.append(
            f"Steps whose {history.status_window} window ended in alert: {alerts}, in warn: "
            f"{warns}."
        )
    parts.append(f"Policy max ECE {max_ece:.3f}")
    parts[-1] += "." if baseline is None else f", baseline (held-out) {baseline:.3f}."
    return " ".join(parts)


def render_history(history: History, *, title: str) -> str:
    """The chart as a standalone SVG document (also inlined in the model page)."""
    return render_template(
        "ui/history.svg",
        c=chart_of(history, title=title),
        min_labeled=history.policy.min_labeled,
        left=LEFT,
        plot_w=PLOT_W,
        top=TOP,
        plot_h=PLOT_H,
        strip_top=STRIP_TOP,
        strip_h=STRIP_H,
        cover_top=COVER_TOP,
        cover_h=COVER_H,
        legend_top=LEGEND_TOP,
        width=WIDTH,
        height=HEIGHT,
    )
