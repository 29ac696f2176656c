"""The demo's incident in headless Chromium at 1280 px: the fleet page, the alerting cohort's
page and a gate page, screenshotted; the history strip is red where the incident began."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from service.demo.scenario import DRIFTING
from tests.integration.browser import Browser, decode_png
from tests.integration.test_served import CALMON, Served, served, wait_until  # noqa: F401
from tests.integration.test_ui_browser import (
    ARTIFACTS,
    check_page,
    full_page_screenshot,
    sign_in,
)

pytestmark = pytest.mark.slow

HOURS = 12
#: The strip's colours (templates/ui/history.svg).
ALERT = (0xFA, 0x52, 0x52)
OK = (0x51, 0xCF, 0x66)
GREY = (0xDE, 0xE2, 0xE6)
#: The strip's cells, as the DOM has them: status, fill and box in page coordinates.
CELLS = """[...document.querySelectorAll('svg.history rect.status')].map(r => {
  const b = r.getBoundingClientRect();
  return {status: r.getAttribute('class').replace('status status-', ''),
          fill: r.getAttribute('fill'), title: r.querySelector('title').textContent,
          x: b.x + scrollX, y: b.y + scrollY, width: b.width, height: b.height};
})"""


def run_demo(server: Served) -> datetime:
    """``calmon demo`` against the server; returns when its drift began (half the span ago)."""
    started = datetime.now(UTC)
    server.cli("demo", "--wait", "0", timeout=600)
    return started - timedelta(hours=HOURS / 2)


def screenshot_pixels(browser: Browser, box: dict[str, float]) -> Any:
    return decode_png(browser.capture(box))


def chart_screenshot(browser: Browser, path: Path) -> None:
    """The history chart alone (to look at)."""
    box = browser.evaluate(
        "(() => { const r = document.querySelector('svg.history').getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })()"
    )
    path.write_bytes(browser.capture(box))


def test_the_alerting_cohort_page_shows_the_incident_where_it_began(
    served: Served,  # noqa: F811
    browser: Browser,
) -> None:
    onset = run_demo(served)
    status, contract = served.call("GET", "/v1/models/demo/contract")
    assert status == 200, contract
    status, decision = served.call("POST", "/v1/gate", {"contract_id": contract["id"]})
    assert status == 201, decision
    ARTIFACTS.mkdir(exist_ok=True)
    sign_in(browser, served.url)
    wait_until(
        lambda: 'data-status="alert"' in served.call("GET", "/ui")[1], 60, "the refreshed alert"
    )
    check_page(browser, f"{served.url}/ui")
    full_page_screenshot(browser, ARTIFACTS / "incident-fleet.png")

    check_page(browser, f"{served.url}/ui/models/demo?cohort=region%3D{DRIFTING}&window=24h")
    full_page_screenshot(browser, ARTIFACTS / "incident-cohort.png")
    chart_screenshot(browser, ARTIFACTS / "incident-cohort-chart.png")
    top = browser.capture({"x": 0, "y": 0, "width": 1280, "height": 760})
    (ARTIFACTS / "incident-cohort-top.png").write_bytes(top)
    assert browser.evaluate("document.querySelector('#drift-status').textContent") == "alert"
    reasons = browser.evaluate("document.querySelector('#reasons li').textContent")
    assert reasons.startswith("ECE above "), reasons
    cells = browser.evaluate(CELLS)
    statuses = [c["status"] for c in cells]
    assert statuses[-1] == "alert", "the strip ends as the header says"
    first = statuses.index("alert")
    began = datetime.fromisoformat(
        cells[first]["title"].split(" window ending ")[1][:16] + "+00:00"
    )
    assert onset < began <= onset + timedelta(hours=5), (onset, began, cells[first]["title"])
    assert "ok" in statuses[:first], "before the incident the strip is green, not grey"
    assert all(s in ("warn", "alert") for s in statuses[first:]), statuses
    assert cells[first]["fill"] == "#fa5252"
    box = {k: cells[first][k] for k in ("x", "y", "width", "height")}
    width, height, pixels = screenshot_pixels(browser, box)
    assert pixels[height // 2][width // 2] == ALERT, "the first alert step is drawn red"
    before = {k: cells[statuses.index("ok")][k] for k in ("x", "y", "width", "height")}
    width, height, pixels = screenshot_pixels(browser, before)
    assert pixels[height // 2][width // 2] == OK

    label, frame = browser.evaluate(
        "['svg.history text.baseline-label', 'svg.history rect.frame'].map(q =>"
        " document.querySelector(q).getBoundingClientRect().bottom)"
    )
    assert label <= frame, "the baseline's label stays in the plot, above the strip"

    check_page(browser, f"{served.url}/ui/models/demo")
    assert browser.evaluate("document.querySelector('h2').textContent").startswith(
        "Now: all, 24h"
    ), "the page opens on the shortest window with a status (1h is still waiting for labels)"
    full_page_screenshot(browser, ARTIFACTS / "incident-model-all.png")
    chart_screenshot(browser, ARTIFACTS / "incident-model-all-chart.png")
    gate = check_page(browser, f"{served.url}/ui/gate/{decision['id']}")
    assert {t["id"] for t in gate["tables"]} >= {"checks", "policy", "evidence-bins", "hashes"}
    full_page_screenshot(browser, ARTIFACTS / "incident-gate.png")
