"""The review page: the reliability diagram with its counts, in a real (headless) browser."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.integration.browser import Browser
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body
from tests.integration.test_served import Served, free_port, served  # noqa: F401
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
    minutes_ago,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
SVG_NS = "{http://www.w3.org/2000/svg}"


def test_the_reliability_svg_shows_every_bin_and_its_count(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    rows = _random_predictions(200, seed=9)
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows)
    reading = client.get(
        "/v1/models/glyphs/calibration?window=24h&cohort=lang:tr", headers=auth.headers()
    ).get_json()
    response = client.get(
        "/v1/models/glyphs/reliability.svg?window=24h&cohort=lang:tr",
        headers=auth.headers("reader"),
    )
    assert response.status_code == 200 and response.content_type == "image/svg+xml"
    svg = ET.fromstring(response.data)
    groups = svg.findall(f".//{SVG_NS}g[@class='bin']")
    assert [int(g.get("data-n")) for g in groups] == [b["n"] for b in reading["bins"]]
    counts = [t.text for t in svg.findall(f".//{SVG_NS}text[@class='count']")]
    assert counts == [f"{b['n']:,}" for b in reading["bins"]]
    assert "lang=tr" in ET.tostring(svg, encoding="unicode")
    contract = client.get("/v1/models/glyphs/contract", headers=auth.headers()).get_json()
    baseline = client.get(
        f"/v1/contracts/{contract['id']}/reliability.svg?split=fit", headers=auth.headers()
    )
    fit_bins = contract["baseline"]["fit"]["calibrated"]["bins"]
    assert len(ET.fromstring(baseline.data).findall(f".//{SVG_NS}g[@class='bin']")) == len(fit_bins)
    assert (
        client.get(
            f"/v1/contracts/{contract['id']}/reliability.svg?split=test", headers=auth.headers()
        ).status_code
        == 422
    )


def test_pages_need_a_reader_and_sign_in_keeps_the_token_out_of_urls(
    client: FlaskClient, auth: Auth
) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    anonymous = client.get("/ui/models/glyphs")
    assert anonymous.status_code == 303
    assert anonymous.headers["Location"] == "/ui/sign-in?next=/ui/models/glyphs"
    wrong = client.post("/ui/sign-in", data={"token": "calmon_nope", "next": "/ui"})
    assert wrong.status_code == 401 and "not valid" in wrong.get_data(as_text=True)
    ingest_only = client.post("/ui/sign-in", data={"token": auth.token("ingest")})
    assert ingest_only.status_code == 401
    signed = client.post(
        "/ui/sign-in", data={"token": auth.token("reader"), "next": "/ui/models/glyphs"}
    )
    assert signed.status_code == 303 and signed.headers["Location"] == "/ui/models/glyphs"
    cookie = signed.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "Secure" in cookie and "SameSite=Strict" in cookie
    assert auth.token("reader") not in signed.headers["Location"]
    page = client.get("/ui/models/glyphs")
    assert page.status_code == 200 and "<svg" in page.get_data(as_text=True)
    assert client.post("/v1/contracts/fit", json=fit_body("x")).status_code == 401
    client.post("/ui/sign-out")
    assert client.get("/ui/models/glyphs").status_code == 303
    header = client.get("/ui/models/glyphs", headers=auth.headers("reader"))
    assert header.status_code == 200
    missing = client.get("/ui/models/nobody", headers=auth.headers("reader"))
    assert missing.status_code == 404


@pytest.fixture
def browser() -> Iterator[Browser]:
    chrome = Browser(free_port())
    try:
        yield chrome
    finally:
        chrome.close()


def test_the_review_page_in_a_browser(served: Served, browser: Browser) -> None:  # noqa: F811
    status, contract = served.call("POST", "/v1/contracts/fit", fit_body("glyphs"))
    assert status == 201
    rows = _random_predictions(300, seed=12)
    preds = [{k: r[k] for k in ("id", "ts", "cohort", "logits")} for r in rows]
    assert (
        served.call("POST", "/v1/predictions", {"model": "glyphs", "predictions": preds})[0] == 200
    )
    labels = [{"id": r["id"], "label": r["label"], "ts": minutes_ago(0)} for r in rows[:250]]
    assert served.call("POST", "/v1/labels", {"model": "glyphs", "labels": labels})[0] == 200
    served.call("POST", "/v1/gate", {"contract_id": contract["id"]})
    _, api = served.call("GET", "/v1/models/glyphs/calibration?window=24h")

    browser.goto(f"{served.url}/ui/models/glyphs")
    browser.wait_for("document.querySelector('form[action=\"/ui/sign-in\"]')")
    assert browser.evaluate("location.pathname") == "/ui/sign-in"
    browser.evaluate(
        f"document.querySelector('input[name=token]').value = {ADMIN_TOKEN!r};"
        "document.querySelector('form[action=\"/ui/sign-in\"]').submit();"
    )
    browser.wait_for(
        "location.pathname === '/ui/models/glyphs' && "
        "document.readyState === 'complete' && document.querySelector('#bins')"
    )
    assert ADMIN_TOKEN not in browser.evaluate("location.href")
    assert browser.evaluate("document.querySelector('#n-labeled').textContent") == "250"
    assert (
        browser.evaluate("document.querySelector('#ece').textContent")
        == f"{api['metrics']['ece']:.4f}"
    )
    assert (
        browser.evaluate("document.querySelector('#ece-debiased').textContent")
        == f"{api['metrics']['ece_debiased']:.4f}"
    )
    lo, hi = api["metrics"]["ece_ci"]
    assert browser.evaluate("document.querySelector('#ece-ci').textContent") == (
        f"{lo:.4f} \u2013 {hi:.4f}"
    )
    assert browser.evaluate("document.querySelectorAll('svg g.bin').length") == len(
        api["bins"]
    ) + len(api["baseline"]["bins"])
    counts = browser.evaluate(
        "[...document.querySelectorAll('#bins tr td:nth-child(2)')].map(c => c.textContent)"
    )
    assert counts == [f"{b['n']:,}" for b in api["bins"]]
    assert browser.evaluate("document.querySelector('#drift-status').textContent") == api["drift"][
        "status"
    ].replace("_", " ")
    assert "fail" in browser.evaluate("document.body.innerText")
    ARTIFACTS.mkdir(exist_ok=True)
    browser.screenshot(ARTIFACTS / "review-page.png")
    assert (ARTIFACTS / "review-page.png").stat().st_size > 10_000
    browser.goto(f"{served.url}/ui/contracts/{contract['id']}")
    browser.wait_for("document.querySelectorAll('svg').length === 4")
    assert contract["content_sha256"] in browser.evaluate("document.body.innerText")
