"""An error that escapes Flask's handlers still gets the JSON envelope, not the server's page."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from service.web.last_resort import LastResort


class Server:
    """What a WSGI server does with ``start_response`` (PEP 3333): a second call must carry
    ``exc_info`` and then replaces the status and headers not yet sent."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.headers: dict[str, str] = {}

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        assert self.status is None or exc_info is not None, "headers set twice without exc_info"
        self.status, self.headers = status, dict(headers)
        return lambda _data: None

    def run(self, app: Callable[..., Iterable[bytes]]) -> Any:
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/"}, self.start_response))
        return json.loads(body)


def _raising(exc: Exception, start_first: bool) -> Callable[..., Iterable[bytes]]:
    def app(_environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if start_first:
            start_response("200 OK", [("Content-Type", "text/html")])
        raise exc

    return app


@pytest.mark.parametrize("start_first", [False, True])
def test_an_escaped_error_is_a_500_envelope(start_first: bool) -> None:
    server = Server()
    body = server.run(LastResort(_raising(RuntimeError("secret /etc/passwd"), start_first)))
    assert server.status is not None and server.status.startswith("500")
    assert server.headers["Content-Type"] == "application/json"
    assert body["error"]["code"] == "internal_error" and "secret" not in json.dumps(body)


@pytest.mark.parametrize("start_first", [False, True])
def test_a_database_lost_outside_the_handlers_is_a_503_envelope(start_first: bool) -> None:
    server = Server()
    lost = OperationalError("ROLLBACK", None, Exception("the connection is lost"))
    body = server.run(LastResort(_raising(lost, start_first)))
    assert server.status is not None and server.status.startswith("503")
    assert server.headers["Retry-After"] == "5"
    assert body["error"]["code"] == "database_unavailable"


def test_a_healthy_reply_passes_untouched() -> None:
    def app(_environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    server = Server()
    assert server.run(LastResort(app)) == {"ok": True} and server.status == "200 OK"
