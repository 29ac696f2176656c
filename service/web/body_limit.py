"""A body sent without ``Content-Length`` (``Transfer-Encoding: chunked``) is held to
``CALMON_MAX_BODY_BYTES`` as one with it is: 413 with the envelope, never a body cut at the
limit.

Werkzeug refuses a ``Content-Length`` over the limit before reading anything, but reads a chunked
body (which the WSGI server, gunicorn, marks ``wsgi.input_terminated``) only up to the limit and
then stops as if it had ended: the first ``CALMON_MAX_BODY_BYTES`` bytes were parsed, so a body
padded past the limit was accepted, and a longer one reported as malformed JSON. Here such a body
is read up to one byte past the limit, and that byte, when it comes, is the 413.
"""

from __future__ import annotations

from typing import IO

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream


class _OverLimitIsError(LimitedStream):
    """A stream of at most ``max_bytes`` bytes: reading a byte more raises 413."""

    def __init__(self, stream: IO[bytes], max_bytes: int) -> None:
        super().__init__(stream, max_bytes + 1, is_max=True)
        self.max_bytes = max_bytes

    def readinto(self, b: bytearray) -> int | None:  # type: ignore[override]
        read = super().readinto(b)
        if self.tell() > self.max_bytes:
            raise RequestEntityTooLarge()
        return read


class BoundedRequest(Request):
    """Flask's request, its body held to the limit whether or not it states its length."""

    @cached_property
    def stream(self) -> IO[bytes]:  # type: ignore[override]
        limit = self.max_content_length
        unstated = self.content_length is None and "wsgi.input_terminated" in self.environ
        if limit is None or not unstated:
            return super().stream
        return _OverLimitIsError(self.environ["wsgi.input"], limit)  # type: ignore[return-value]
