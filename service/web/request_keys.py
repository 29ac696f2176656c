"""The ``Idempotency-Key`` request header of the audited writes (``service.audit.request_keys``)."""

from __future__ import annotations

import hashlib
import re

from flask import request

from service.audit.request_keys import MAX_KEY_LENGTH, RequestKey
from service.web.http_errors import ApiError

HEADER = "Idempotency-Key"
_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")


def request_key(operation: str) -> RequestKey | None:
    """The request's ``Idempotency-Key`` for ``operation``, with the SHA-256 of the request's
    path and body (so the key names this request only), or None without the header; 400 for a
    key that is empty, longer than ``MAX_KEY_LENGTH`` or not printable ASCII."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ApiError(
            400,
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters without spaces",
            details=[{"field": HEADER, "message": "not a valid key"}],
        )
    digest = hashlib.sha256(request.path.encode() + b"\n" + request.get_data(cache=True))
    return RequestKey(key, operation, digest.hexdigest())
