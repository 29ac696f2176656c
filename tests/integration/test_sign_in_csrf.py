"""Signing in and out only from calmon's own pages: a form another site sends is refused (403),
so no page elsewhere can sign a reader's browser in with its own token (login CSRF), or out."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from tests.integration.browser import Browser
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.test_served import Served, free_port, served  # noqa: F401

HOST = "localhost"  # the Flask test client's Host


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": f"http://{HOST}"},
        {"Origin": "https://evil.example"},
        {"Origin": f"http://{HOST}.evil.example"},
        {"Origin": "null"},
    ],
    ids=[
        "cross-site",
        "same-site",
        "cross-site whatever its Origin",
        "other origin",
        "lookalike",
        "opaque origin",
    ],
)
def test_a_sign_in_form_from_another_site_is_refused(
    client: FlaskClient, auth: Auth, headers: dict[str, str]
) -> None:
    response = client.post(
        "/ui/sign-in", data={"token": auth.token("reader"), "next": "/ui"}, headers=headers
    )
    assert response.status_code == 403
    assert "another site" in response.get_data(as_text=True)
    assert client.get_cookie("calmon_session") is None
    assert not [c for c in response.headers.getlist("Set-Cookie") if "calmon_session=" in c]


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "same-origin", "Origin": "null"},  # this site's page, no-referrer
        {"Sec-Fetch-Site": "none"},
        {"Origin": f"http://{HOST}"},
        {},  # no browser: a script holds no reader's cookie to ride on
    ],
    ids=["same-origin", "typed", "own origin", "no browser"],
)
def test_a_sign_in_form_from_this_site_signs_in(
    client: FlaskClient, auth: Auth, headers: dict[str, str]
) -> None:
    response = client.post(
        "/ui/sign-in", data={"token": auth.token("reader"), "next": "/ui"}, headers=headers
    )
    assert response.status_code == 303 and response.headers["Location"] == "/ui"
    assert client.get_cookie("calmon_session") is not None


def test_a_sign_out_form_from_another_site_is_refused(client: FlaskClient, auth: Auth) -> None:
    signed = client.post(
        "/ui/sign-in",
        data={"token": auth.token("reader"), "next": "/ui"},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert signed.status_code == 303
    refused = client.post("/ui/sign-out", headers={"Sec-Fetch-Site": "cross-site"})
    assert refused.status_code == 403
    assert client.get("/ui").status_code == 200, "still signed in"
    out = client.post("/ui/sign-out", headers={"Sec-Fetch-Site": "same-origin"})
    assert out.status_code == 303
    assert client.get("/ui").status_code == 303, "signed out"


@pytest.fixture
def other_site() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A site of its own (``localhost``, where calmon is ``127.0.0.1``) serving the pages of the
    returned mapping."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}", pages
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_browser_is_not_signed_in_by_another_sites_page(
    served: Served,  # noqa: F811
    other_site: tuple[str, dict[str, bytes]],
) -> None:
    site, pages = other_site
    pages["/"] = (
        f'<form method="post" action="{served.url}/ui/sign-in">'
        f'<input name="token" value="{ADMIN_TOKEN}"><input name="next" value="/ui"></form>'
        "<script>document.forms[0].submit()</script>"
    ).encode()
    browser = Browser(free_port())
    try:
        browser.goto(f"{site}/")
        browser.wait_for(f"location.href.startsWith({served.url!r})")
        browser.wait_for("document.readyState === 'complete' && document.querySelector('h1')")
        assert browser.evaluate("document.querySelector('h1').textContent") == "403"
        browser.goto(f"{served.url}/ui")
        browser.wait_for("document.querySelector('form[action=\"/ui/sign-in\"]')")
        assert browser.evaluate("location.pathname") == "/ui/sign-in", "not signed in"
        # This site's own form still signs in (the page's no-referrer policy makes its Origin
        # null; Sec-Fetch-Site says same-origin).
        browser.evaluate(
            f"document.querySelector('input[name=token]').value = {ADMIN_TOKEN!r};"
            "document.querySelector('form[action=\"/ui/sign-in\"]').submit();"
        )
        browser.wait_for("location.pathname === '/ui' && document.readyState === 'complete'")
        assert browser.evaluate("document.querySelector('form[action=\"/ui/sign-out\"]') !== null")
    finally:
        browser.close()
