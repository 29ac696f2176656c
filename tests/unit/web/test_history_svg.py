"""The ECE-over-time chart: one band and point per labeled step, gaps, coverage, statuses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask

from service.calibration.vocabulary import Status
from service.common.errors import ErrorCollector
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import parse_labeled_set
from service.contracts.model import Contract
from service.contracts.requests import FitRequest, parse_spec_fields
from service.stream.history import History, HistoryPoint
from service.web import history_svg
from service.web.history_svg import COVER_TOP, LEFT, PLOT_H, PLOT_W, TOP, chart_of, render_history
from tests.integration.factories import (
    REFERENCE_EVAL_LABELS,
    REFERENCE_EVAL_LOGITS,
    REFERENCE_FIT_LABELS,
    REFERENCE_FIT_LOGITS,
    contract_fields,
)

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 11, 29, 0, tzinfo=UTC)
STEP = timedelta(hours=1)
TEMPLATES = history_svg.__file__.replace("history_svg.py", "templates")


@pytest.fixture(scope="module")
def contract() -> Contract:
    errors = ErrorCollector()
    fields = parse_spec_fields(contract_fields(), errors)
    sets = [
        parse_labeled_set(
            {"logits": z, "labels": y},
            name,
            task="multiclass",
            classes=["a", "b", "c"],
            errors=errors,
        )
        for name, z, y in (
            ("fit", REFERENCE_FIT_LOGITS, REFERENCE_FIT_LABELS),
            ("eval", REFERENCE_EVAL_LOGITS, REFERENCE_EVAL_LABELS),
        )
    ]
    errors.raise_if_any()
    spec = fit_contract_spec(FitRequest(fields, "temperature", *sets))
    return Contract("c-1", 1, spec, datetime(2026, 11, 1, tzinfo=UTC), "tests", "0" * 64)


def point(
    i: int, n: int, labeled: int, ece: float | None = None, status: str = "ok"
) -> HistoryPoint:
    known = ece is not None and labeled > 0
    return HistoryPoint(
        start=START + i * STEP,
        contract_version=1 if n else None,
        n_predictions=n,
        n_labeled=labeled,
        ece=ece + 0.02 if known and ece is not None else None,
        ece_debiased=ece if known else None,
        ece_ci=(max((ece or 0) - 0.03, 0.0), (ece or 0) + 0.04) if known else None,
        nll=None,
        brier=None,
        accuracy=None,
        refit_temperature=None,
        refit_temperature_ci=None,
        confidence_psi=None,
        confidence_psi_no_shift=None,
        status=status if n else "insufficient_data",
    )


#: 10 steps: two labeled runs (0-2 and 5-7) around a gap without predictions (3) and one with
#: predictions but no labels (4); step 8 mostly unlabeled, step 9 wholly.
POINTS = (
    point(0, 100, 90, 0.03),
    point(1, 100, 95, 0.05),
    point(2, 100, 90, 0.04, "warn"),
    point(3, 0, 0),
    point(4, 50, 0, status="insufficient_data"),
    point(5, 100, 80, 0.20, "alert"),
    point(6, 120, 100, 0.18, "alert"),
    point(7, 100, 60, 0.09, "insufficient_data"),
    point(8, 100, 20, 0.07, "ok"),
    point(9, 80, 0, status="insufficient_data"),
)


@pytest.fixture
def history(contract: Contract) -> History:
    return History("glyphs", "all", START, START + 10 * STEP, STEP, contract, POINTS)


def test_one_band_and_point_per_labeled_step_and_lines_stop_at_gaps(history: History) -> None:
    chart = chart_of(history, title="t")
    labeled = [i for i, p in enumerate(POINTS) if p.n_labeled]
    assert len(chart.marks) == len(labeled) == 7
    assert [m.start for m in chart.marks] == [POINTS[i].start.isoformat() for i in labeled]
    width = PLOT_W / 10
    assert [round(m.cx, 6) for m in chart.marks] == [
        round(LEFT + (i + 0.5) * width, 6) for i in labeled
    ]
    assert [len(line.split()) for line in chart.ece_lines] == [3, 4]
    assert [len(line.split()) for line in chart.plugin_lines] == [3, 4]
    for m in chart.marks:
        assert TOP <= m.band_top <= m.point_y <= m.band_top + m.band_height <= TOP + PLOT_H


def test_the_policy_and_baseline_lines_and_the_axis(history: History, contract: Contract) -> None:
    chart = chart_of(history, title="t")
    assert chart.max_ece is not None and chart.max_ece.value == contract.policy.max_ece
    baseline = contract.baseline_reading().ece_debiased
    assert chart.baseline is not None and chart.baseline.value == baseline
    labels = [float(t.label) for t in chart.y_ticks]
    assert labels[0] == 0 and labels[-1] >= max(0.24, contract.policy.max_ece, baseline)
    assert all(TOP - 1e-9 <= t.at <= TOP + PLOT_H + 1e-9 for t in chart.y_ticks)


def test_coverage_bars_mark_mostly_unlabeled_steps(history: History) -> None:
    chart = chart_of(history, title="t")
    with_predictions = [p for p in POINTS if p.n_predictions]
    assert len(chart.coverage) == len(with_predictions)
    assert [b.low for b in chart.coverage] == [
        p.n_labeled / p.n_predictions < 0.5 for p in with_predictions
    ]
    tallest = max(chart.coverage, key=lambda b: b.outline_height)
    assert tallest.outline_top == pytest.approx(COVER_TOP)
    for bar, p in zip(chart.coverage, with_predictions, strict=True):
        assert bar.fill_height == pytest.approx(bar.outline_height * p.n_labeled / p.n_predictions)


def test_status_changes_are_marked_between_judged_steps_only(history: History) -> None:
    chart = chart_of(history, title="t")
    assert [m.label for m in chart.status_changes] == ["ok → warn", "warn → alert", "alert → ok"]
    assert [s.status for s in chart.strip] == [p.status for p in POINTS]
    assert chart.versions == ()


def test_the_svg_is_an_image_with_text_alternatives(history: History) -> None:
    app = Flask(__name__, template_folder=TEMPLATES)
    with app.app_context():
        svg = ET.fromstring(render_history(history, title="ECE over time"))
    assert svg.get("role") == "img"
    assert "7 of 10 steps have labels" in svg.get("aria-label", "")
    assert svg.find(f"{SVG}title") is not None and svg.find(f"{SVG}desc") is not None
    bands = svg.findall(f".//{SVG}rect[@class='band']")
    points = svg.findall(f".//{SVG}circle[@class='point']")
    assert len(bands) == len(points) == 7
    assert all(b.find(f"{SVG}title") is not None for b in bands)
    steps = svg.findall(f".//{SVG}g[@class='step']")
    assert all("ECE debiased" in (g.findtext(f"{SVG}title") or "") for g in steps)
    assert len(svg.findall(f".//{SVG}polyline[@class='ece-line']")) == 2
    assert len(svg.findall(f".//{SVG}g[@class='cover low']")) == 3


def test_an_empty_history_says_so(history: History) -> None:
    empty = History("glyphs", "all", START, START + STEP, STEP, history.contract, (point(0, 0, 0),))
    app = Flask(__name__, template_folder=TEMPLATES)
    with app.app_context():
        svg = render_history(empty, title="t")
    assert "no labeled predictions in this range" in svg
    assert "No step in this range has labels." in svg


def test_a_step_with_fewer_labels_than_min_labeled_is_hollow_and_sets_no_axis(
    history: History, contract: Contract
) -> None:
    assert contract.policy.min_labeled == 5
    few = point(10, 4, 3, 0.63, "insufficient_data")
    with_few = History("glyphs", "all", START, START + 11 * STEP, STEP, contract, (*POINTS, few))
    before, after = chart_of(history, title="t"), chart_of(with_few, title="t")
    assert [t.label for t in after.y_ticks] == [t.label for t in before.y_ticks]
    assert [m.hollow for m in after.marks] == [False] * 7 + [True]
    assert after.marks[-1].point_y == pytest.approx(TOP), "drawn at the top of the axis"
    assert "fewer labels than min_labeled 5" in after.marks[-1].title


def test_the_strip_shows_the_window_status_at_each_step_end(history: History) -> None:
    statuses = (
        "insufficient_data",
        "ok",
        "ok",
        "ok",
        "ok",
        "warn",
        "alert",
        "alert",
        "alert",
        "ok",
    )
    windowed = History(
        "glyphs",
        "all",
        START,
        START + 10 * STEP,
        STEP,
        history.contract,
        POINTS,
        status_window="24h",
        window_statuses=tuple(Status(s) for s in statuses),
    )
    chart = chart_of(windowed, title="t")
    assert [s.status for s in chart.strip] == list(statuses)
    assert [m.label for m in chart.status_changes] == ["ok → warn", "warn → alert", "alert → ok"]
    assert chart.strip[5].title.startswith("24h window ending 2026-11-29 06:00 UTC: warn.")
    assert "Steps whose 24h window ended in alert: 3, in warn: 1." in chart.summary


def test_a_rule_label_near_the_bottom_goes_over_its_line_not_into_the_strip() -> None:
    bottom = TOP + PLOT_H
    assert history_svg._label_y(TOP + 40) == TOP + 53
    for line_y in (bottom, bottom - 5, bottom - 15):
        assert history_svg._label_y(line_y) <= bottom - 3


def test_when_no_step_has_min_labeled_labels_one_outlier_still_sets_no_axis(
    contract: Contract,
) -> None:
    few = (*(point(i, 4, 3, 0.05 + 0.005 * i) for i in range(10)), point(10, 4, 3, 0.9))
    chart = chart_of(
        History("glyphs", "all", START, START + 11 * STEP, STEP, contract, few), title="t"
    )
    calm = chart_of(
        History("glyphs", "all", START, START + 10 * STEP, STEP, contract, few[:10]), title="t"
    )
    assert all(m.hollow for m in chart.marks)
    assert [t.label for t in chart.y_ticks] == [t.label for t in calm.y_ticks]
    assert float(chart.y_ticks[-1].label) < 0.9
