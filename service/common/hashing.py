"""Canonical JSON and the digests calmon stores: contracts, audit events, gate decisions."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8, no NaN: the bytes a hash is over."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_of(document: Any) -> str:
    """SHA-256 hex digest of ``document``'s canonical JSON."""
    return hashlib.sha256(canonical_json(document)).hexdigest()


def digests_match(a: str, b: str) -> bool:
    """Compare two hex digests in constant time."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))
