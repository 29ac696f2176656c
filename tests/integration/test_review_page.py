"""The review page: the reliability diagram with its counts, in a real (headless) browser."""

from __future__ import annotations

import hashlib
import html
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text, update

from service import create_app
from service.auth.tokens import Role
from service.db.database import Database
from service.db.models import UiSession
from tests.integration.browser import Browser
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body
from tests.integration.test_served import Served, served  # noqa: F401
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
    cookie = next(
        c for c in signed.headers.getlist("Set-Cookie") if c.startswith("calmon_session=")
    )
    assert "HttpOnly" in cookie and "Secure" in cookie and "SameSite=Strict" in cookie
    assert auth.token("reader") not in signed.headers["Location"]
    assert auth.token("reader") not in " ".join(signed.headers.getlist("Set-Cookie"))
    page = client.get("/ui/models/glyphs")
    assert page.status_code == 200 and "<svg" in page.get_data(as_text=True)
    assert client.post("/v1/contracts/fit", json=fit_body("x")).status_code == 401
    client.post("/ui/sign-out")
    assert client.get("/ui/models/glyphs").status_code == 303
    header = client.get("/ui/models/glyphs", headers=auth.headers("reader"))
    assert header.status_code == 200
    missing = client.get("/ui/models/nobody", headers=auth.headers("reader"))
    assert missing.status_code == 404


@pytest.mark.slow
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
    assert browser.evaluate("document.querySelectorAll('svg.full g.bin').length") == len(
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
    browser.wait_for("document.querySelectorAll('svg.full').length === 4")
    assert contract["content_sha256"] in browser.evaluate("document.body.innerText")
    assert "measured by calmon" in browser.evaluate("document.body.innerText")
    assert (
        browser.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor")
        == "rgb(11, 60, 93)"
    ), "the stylesheet loads under the Content-Security-Policy"
    assert browser.evaluate("document.cookie") == "", "the session cookie is HttpOnly"


SIGNED_OUT = "/ui/sign-in?next=/ui/models/glyphs"


def sign_in(client: FlaskClient, token: str) -> str:
    """Sign in; return the session id the cookie holds."""
    response = client.post("/ui/sign-in", data={"token": token, "next": "/ui"})
    assert response.status_code == 303, response.get_data(as_text=True)
    cookie = client.get_cookie("calmon_session")
    assert cookie is not None
    return cookie.value


def test_the_cookie_holds_a_session_id_stored_hashed(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    session_id = sign_in(client, auth.token("reader"))
    assert len(session_id) >= 43 and not session_id.startswith("calmon_")
    with db.engine.connect() as connection:
        rows = connection.execute(text("SELECT * FROM ui_sessions")).mappings().all()
    assert len(rows) == 1
    row = rows[0]
    assert row["id_sha256"] == hashlib.sha256(session_id.encode()).hexdigest()
    assert session_id not in str(dict(row)) and auth.token("reader") not in str(dict(row))
    assert (row["principal"], row["role"]) == ("test-reader", "reader")
    lifetime = _as_utc(row["expires_at"]) - _as_utc(row["created_at"])
    assert lifetime == timedelta(hours=12)
    assert client.get("/ui/models/glyphs").status_code == 200

    client.post("/ui/sign-out")
    with db.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM ui_sessions")).scalar() == 0
    client.set_cookie("calmon_session", session_id)
    assert client.get("/ui/models/glyphs").headers["Location"] == SIGNED_OUT, "ended server-side"

    client.delete_cookie("calmon_session")
    client.set_cookie("calmon_token", auth.token("reader"))
    assert client.get("/ui/models/glyphs").status_code == 303, "a token cookie is never read"


def _as_utc(value: object) -> datetime:
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def test_revoking_the_token_ends_its_sessions_at_once(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    from service.auth.service import create_token, revoke_token

    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    with db.session() as session:
        token = create_token(session, role=Role.READER, name="reviewer", actor="tests")
    sign_in(client, token)
    other = client.application.test_client()
    sign_in(other, auth.token("reader"))
    assert client.get("/ui/models/glyphs").status_code == 200
    with db.session() as session:
        revoke_token(session, name="reviewer", actor="tests")
    assert client.get("/ui/models/glyphs").headers["Location"] == SIGNED_OUT
    assert client.get("/v1/models/glyphs/reliability.svg").status_code == 401
    assert other.get("/ui/models/glyphs").status_code == 200, "other tokens' sessions live on"
    events = client.get("/v1/audit/events?type=token_revoked", headers=auth.headers()).get_json()
    assert events["events"][0]["details"]["sessions_ended"] == 1


def test_sessions_expire(client: FlaskClient, auth: Auth, db: Database) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    sign_in(client, auth.token("reader"))
    past = datetime.now(UTC) - timedelta(seconds=1)
    with db.session() as session:
        session.execute(update(UiSession).values(expires_at=past))
        session.commit()
    assert client.get("/ui/models/glyphs").headers["Location"] == SIGNED_OUT
    sign_in(client.application.test_client(), auth.token("reader"))
    with db.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM ui_sessions")).scalar() == 1, (
            "expired sessions are purged at the next sign-in"
        )


def test_a_changed_bootstrap_token_ends_its_sessions(
    client: FlaskClient, auth: Auth, database_url: str
) -> None:
    client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    session_id = sign_in(client, ADMIN_TOKEN)
    assert client.get("/ui/models/glyphs").status_code == 200
    rotated = create_app(
        {
            "database_url": database_url,
            "admin_token": "calmon_a-new-bootstrap-token",
            "refresh_in_service": False,
        }
    )
    try:
        after = rotated.test_client()
        after.set_cookie("calmon_session", session_id)
        assert after.get("/ui/models/glyphs").headers["Location"] == SIGNED_OUT
    finally:
        rotated.extensions["calmon.database"].dispose()


PAGE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def test_every_review_response_forbids_framing_and_sniffing(
    client: FlaskClient, auth: Auth
) -> None:
    contract = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers()).get_json()
    decision = client.post(
        "/v1/gate", json={"contract_id": contract["id"]}, headers=auth.headers()
    ).get_json()
    anonymous = [client.get(u) for u in ("/ui/sign-in", "/ui/models/glyphs", "/ui/calmon.css")]
    sign_in(client, auth.token("reader"))
    pages = [
        client.get(u)
        for u in (
            "/ui",
            "/ui/models/glyphs",
            f"/ui/contracts/{contract['id']}",
            "/ui/contracts/nope",
            "/ui/models/nobody",
            "/v1/models/glyphs/reliability.svg",
            f"/v1/contracts/{contract['id']}/reliability.svg",
            f"/v1/contracts/{contract['id']}/reliability.svg?split=test",
            f"/ui/gate/{decision['id']}",
            "/ui/gate/nope",
            "/ui/models/glyphs?range=1y",
            "/v1/models/glyphs/history.svg",
            "/v1/models/glyphs/history.svg?step=7m",
        )
    ]
    for response in anonymous + pages:
        for name, value in PAGE_HEADERS.items():
            assert response.headers.get(name) == value, (response.request.path, name)
        policy = response.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy and "script-src" not in policy
    assert "style-src 'self'" in pages[1].headers["Content-Security-Policy"]
    assert (
        pages[5].headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    )
    assert (
        pages[-2].headers["Content-Security-Policy"] == pages[5].headers["Content-Security-Policy"]
    )
    for response in pages:
        if response.mimetype == "text/html":
            html = response.get_data(as_text=True)
            assert "<style" not in html and " style=" not in html and "<script" not in html
    css = anonymous[2]
    assert css.status_code == 200 and css.mimetype == "text/css"


def test_cohort_links_are_url_encoded(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    value = "a&b #c ü"
    rows = [{**r, "cohort": {"region": value}} for r in _random_predictions(20, seed=3)]
    _send_predictions(client, auth, "glyphs", rows)
    page = client.get("/ui/models/glyphs", headers=auth.headers("reader")).get_data(as_text=True)
    href = "?window=1h&amp;cohort=region%3Da%26b+%23c+%C3%BC&amp;range=fit"
    assert f'href="{href}"' in page
    followed = client.get("/ui/models/glyphs" + html.unescape(href), headers=auth.headers("reader"))
    assert followed.status_code == 200
    assert f"region={value}" in html.unescape(followed.get_data(as_text=True))


@pytest.mark.parametrize(
    "next_value, location",
    [
        ("/ui/models/glyphs", "/ui/models/glyphs"),
        (
            "/ui/models/glyphs?window=1h&cohort=region:ü",
            "/ui/models/glyphs?window=1h&cohort=region:%C3%BC",
        ),
        ("https://evil.example/ui", "/ui"),
        ("//evil.example/ui", "/ui"),
        ("/\\evil.example", "/ui"),
        ("/ui\\@evil.example", "/ui"),
        ("/ui\r\nSet-Cookie: a=b", "/ui"),
        ("/ui/x\nLocation: https://evil.example", "/ui"),
        ("javascript:alert(1)", "/ui"),
        ("/uievil", "/ui"),
        ("/ui/../v1/contracts", "/ui"),
        ("/ui/%2e%2e/v1/contracts", "/ui"),
        ("", "/ui"),
        ("/ui" + "x" * 3000, "/ui"),
    ],
)
def test_sign_in_next_never_leaves_the_review_pages(
    client: FlaskClient, auth: Auth, next_value: str, location: str
) -> None:
    form = client.get("/ui/sign-in", query_string={"next": next_value})
    assert form.status_code == 200
    signed = client.post("/ui/sign-in", data={"token": auth.token("reader"), "next": next_value})
    assert signed.status_code == 303
    assert signed.headers["Location"] == location
    assert "\n" not in signed.headers["Location"] and "\r" not in signed.headers["Location"]


def test_the_sign_in_redirect_keeps_the_query_encoded(client: FlaskClient, auth: Auth) -> None:
    response = client.get("/ui/models/glyphs?window=1h&cohort=region:a%26b")
    assert response.status_code == 303
    assert response.headers["Location"] == (
        "/ui/sign-in?next=/ui/models/glyphs%3Fwindow%3D1h%26cohort%3Dregion%3Aa%2526b"
    )
    form = client.get(response.headers["Location"]).get_data(as_text=True)
    assert 'value="/ui/models/glyphs?window=1h&amp;cohort=region:a%26b"' in form
