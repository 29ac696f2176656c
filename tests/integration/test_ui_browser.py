"""The review pages in headless Chromium: the history chart's pixels, accessibility basics and the
Content-Security-Policy on every page (no violation, the stylesheet applied)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.browser import Browser, decode_png
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body
from tests.integration.test_served import Served, served, wait_until  # noqa: F401
from tests.integration.test_stream import minutes_ago

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
#: The history chart's colours (templates/ui/history.svg): the interval band and the points.
BAND = (0xA5, 0xD8, 0xFF)
POINT = (0x0B, 0x4F, 0x8A)


def populate(served: Served) -> dict[str, Any]:  # noqa: F811
    """A model whose last 20 hours hold labeled predictions, over-confident from 8 hours ago,
    the last 2 hours mostly unlabeled; a gate decision."""
    status, contract = served.call("POST", "/v1/contracts/fit", fit_body("glyphs"))
    assert status == 201
    rng = np.random.default_rng(21)
    predictions, labels = [], []
    for i in range(1200):
        minutes = 5 + (i * 997) % (20 * 60)
        sharp = 3.5 if minutes < 8 * 60 else 1.0
        z = rng.normal(size=3) * 1.3
        p = np.exp(z) / np.exp(z).sum()
        predictions.append(
            {
                "id": f"b{i}",
                "ts": minutes_ago(minutes),
                "cohort": {"region": "emea" if i % 2 else "apac"},
                "logits": (z * sharp).tolist(),
            }
        )
        if minutes > 120 or i % 5 == 0:
            labels.append({"id": f"b{i}", "label": int(rng.choice(3, p=p)), "ts": minutes_ago(0)})
    body = {"model": "glyphs", "predictions": predictions}
    assert served.call("POST", "/v1/predictions", body)[0] == 200
    assert served.call("POST", "/v1/labels", {"model": "glyphs", "labels": labels})[0] == 200
    status, decision = served.call("POST", "/v1/gate", {"contract_id": contract["id"]})
    assert status == 201
    return {"contract": contract, "decision": decision}


def sign_in(browser: Browser, url: str) -> None:
    browser.goto(f"{url}/ui/sign-in")
    browser.evaluate(
        f"document.querySelector('input[name=token]').value = {ADMIN_TOKEN!r};"
        "document.querySelector('form[action=\"/ui/sign-in\"]').submit();"
    )
    browser.wait_for("location.pathname === '/ui' && document.readyState === 'complete'")


ACCESSIBILITY = """(() => {
  const levels = [...document.querySelectorAll('h1,h2,h3,h4,h5,h6')].map(h => +h.tagName[1]);
  const scopes = ['col', 'row', 'colgroup', 'rowgroup'];
  const tables = [...document.querySelectorAll('table')].map(t => ({
    id: t.id,
    headers: t.querySelectorAll('th').length,
    unscoped: [...t.querySelectorAll('th')].filter(th => !scopes.includes(th.scope)).length,
  }));
  const charts = [...document.querySelectorAll('svg')].map(s => ({
    role: s.getAttribute('role'),
    label: s.getAttribute('aria-label') || '',
    title: (s.querySelector(':scope > title') || {}).textContent || '',
  }));
  const unlabeled = [...document.querySelectorAll('select, input:not([type=hidden])')]
    .filter(e => !e.labels || e.labels.length === 0).length;
  return {levels, tables, charts, unlabeled, lang: document.documentElement.lang,
          csp: window.__csp, header: getComputedStyle(document.querySelector('header'))
          .backgroundColor};
})()"""


def check_page(browser: Browser, url: str) -> dict[str, Any]:
    """Load ``url`` and assert the accessibility basics and a clean CSP; return the findings."""
    browser.goto(url)
    browser.wait_for("document.readyState === 'complete'")
    found: dict[str, Any] = browser.evaluate(ACCESSIBILITY)
    levels = found["levels"]
    assert levels and levels[0] == 1 and levels.count(1) == 1, (url, levels)
    assert all(b <= a + 1 for a, b in itertools.pairwise(levels)), (url, levels)
    for table in found["tables"]:
        assert table["headers"] and not table["unscoped"], (url, table)
    for chart in found["charts"]:
        assert chart["role"] == "img" and chart["label"] and chart["title"], (url, chart)
    assert found["unlabeled"] == 0 and found["lang"] == "en", url
    assert found["csp"] == [], (url, found["csp"])
    assert found["header"] == "rgb(11, 60, 93)", "the stylesheet loads under the policy"
    return found


def full_page_screenshot(browser: Browser, path: Path) -> None:
    height = int(browser.evaluate("document.documentElement.scrollHeight"))
    path.write_bytes(browser.capture({"x": 0, "y": 0, "width": 1280, "height": height}))


def test_the_pages_in_a_browser_draw_the_chart_and_keep_to_the_basics(
    served: Served,  # noqa: F811
    browser: Browser,
) -> None:
    stored = populate(served)
    ARTIFACTS.mkdir(exist_ok=True)
    sign_in(browser, served.url)
    wait_until(
        lambda: served.call("GET", "/ui")[1].count('data-status="none"') == 0,
        30,
        "the refresher's readings",
    )
    fleet = check_page(browser, f"{served.url}/ui")
    assert len(fleet["tables"]) == 1
    full_page_screenshot(browser, ARTIFACTS / "ui-fleet.png")

    model = check_page(browser, f"{served.url}/ui/models/glyphs?range=24h")
    assert any(c["label"].startswith("Debiased ECE of glyphs") for c in model["charts"])
    full_page_screenshot(browser, ARTIFACTS / "ui-model.png")
    box, frame = browser.evaluate(
        "['svg.history', 'svg.history rect.frame'].map(q => {"
        " const r = document.querySelector(q).getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })"
    )
    points = browser.evaluate(
        "[...document.querySelectorAll('svg.history circle.point')].map(c => {"
        " const r = c.getBoundingClientRect();"
        " return [r.x + scrollX + r.width / 2, r.y + scrollY + r.height / 2]; })"
    )
    solid = browser.evaluate(
        "[...document.querySelectorAll('svg.history circle.point:not(.hollow)')].map(c => {"
        " const r = c.getBoundingClientRect();"
        " return [r.x + scrollX + r.width / 2, r.y + scrollY + r.height / 2]; })"
    )
    bands = browser.evaluate(
        "[...document.querySelectorAll('svg.history rect.band')].map(b => {"
        " const r = b.getBoundingClientRect();"
        " return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })"
    )
    assert len(points) == len(bands) >= 10
    png = browser.capture(box)
    (ARTIFACTS / "ui-history-chart.png").write_bytes(png)
    width, height, pixels = decode_png(png)
    assert abs(width - box["width"]) <= 1 and abs(height - box["height"]) <= 1
    top, left = int(frame["y"] - box["y"]) - 4, int(frame["x"] - box["x"]) - 4
    plot = [
        row[left : left + int(frame["width"]) + 8]
        for row in pixels[top : top + int(frame["height"]) + 8]
    ]
    colours = [pixel for row in plot for pixel in row]
    assert colours.count(BAND) >= 20 * len(bands), "the interval band is drawn in the plot"
    assert len(solid) >= 10, "steps with min_labeled labels are drawn solid"
    assert colours.count(POINT) >= 10 * len(solid), "the points are drawn in the plot"

    def at(x: float, y: float) -> tuple[int, int, int]:
        return pixels[int(y - box["y"])][int(x - box["x"])]

    assert [at(x, y) for x, y in solid] == [POINT] * len(solid), "each point where the DOM says"
    for x, y, w, h in bands:
        if h >= 4 and w >= 4:
            inside = [
                pixels[int(r - box["y"])][int(c - box["x"])]
                for r in np.arange(y + 1, y + h - 1)
                for c in np.arange(x + 1, x + w - 1)
                if 0 <= int(r - box["y"]) < height and 0 <= int(c - box["x"]) < width
            ]
            assert BAND in inside, (x, y, w, h)

    check_page(browser, f"{served.url}/ui/contracts/{stored['contract']['id']}")
    full_page_screenshot(browser, ARTIFACTS / "ui-contract.png")
    gate = check_page(browser, f"{served.url}/ui/gate/{stored['decision']['id']}")
    assert {t["id"] for t in gate["tables"]} >= {"checks", "policy", "evidence-bins", "hashes"}
    full_page_screenshot(browser, ARTIFACTS / "ui-gate.png")
    check_page(browser, f"{served.url}/ui/models/nobody")
    check_page(browser, f"{served.url}/ui/gate/nothing-here")
    browser.evaluate("document.querySelector('form[action=\"/ui/sign-out\"]').submit()")
    browser.wait_for("location.pathname === '/ui/sign-in' && document.readyState === 'complete'")
    check_page(browser, f"{served.url}/ui/sign-in")
