"""One keep-alive HTTP connection to calmon: a request in, ``(status, decoded JSON)`` out.

A connection failure (refused, reset, timed out, closed while idle) raises ``Unreachable``; any
reply, error statuses included, is returned, also one the server sent before it had read the
whole body and closed (a 413 for a body over its limit). Not thread-safe: each thread keeps its
own.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

JSON = "application/json"


class Unreachable(Exception):
    """The service could not be reached, or the connection broke before a reply."""


class Transport:
    """Requests to ``url`` (``http://host:port`` or ``https://...``) with a bearer ``token``."""

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = kind(self._host, self._port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = JSON,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request; the reply's status and decoded JSON body (text for non-JSON).

        A kept-alive connection the server closed while idle (gunicorn's sync workers close
        each one after its reply) is opened anew and the request sent on it once more."""
        headers = {"Authorization": f"Bearer {self._token}", "Accept": JSON, **(headers or {})}
        if body is not None:
            headers["Content-Type"] = content_type
        reused = self._conn is not None
        try:
            status, kind, raw = self._exchange(method, path, body, headers)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            self.close()
            if not reused:
                raise Unreachable(f"cannot reach {self.url}: {exc}") from exc
            try:
                status, kind, raw = self._exchange(method, path, body, headers)
            except (OSError, http.client.HTTPException) as again:
                self.close()
                raise Unreachable(f"cannot reach {self.url}: {again}") from again
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise Unreachable(f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc
        if kind.startswith(JSON):
            try:
                return status, json.loads(raw or b"null")
            except ValueError:
                pass
        return status, raw.decode(errors="replace")

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        conn = self._connection()
        try:
            conn.request(method, self._prefix + path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            # A server may answer before it has read the whole body (413 for a body over its
            # limit) and close the connection: that answer, when it came, is the reply.
            response = _early_reply(conn)
            if response is None:
                raise
        else:
            response = conn.getresponse()
        raw = response.read()
        if response.will_close:
            self.close()
        return response.status, response.getheader("Content-Type", ""), raw

    def json(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """``request`` with a JSON body (None: no body)."""
        data = None if body is None else json.dumps(body).encode()
        return self.request(method, path, data, headers=headers)


def _early_reply(conn: http.client.HTTPConnection) -> http.client.HTTPResponse | None:
    """The reply a server sent before the connection broke under a request still being sent,
    or None when it sent none."""
    try:
        return conn.getresponse()
    except (OSError, http.client.HTTPException):
        return None
