"""The audit chain: every event carries the hash of the one before it.

``sha256 = SHA-256(canonical JSON of {prev, ts, type, actor, model, contract_id, details})``
where ``prev`` is the previous event's ``sha256`` (64 zeros for the first). Changing, removing or
reordering any stored event breaks every hash after it, which ``verify`` finds.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from service.contracts import canonical_json
from service.validation import format_timestamp

GENESIS = "0" * 64


def event_digest(
    prev: str,
    *,
    ts: datetime,
    type: str,
    actor: str,
    model: str | None,
    contract_id: str | None,
    details: dict[str, Any],
) -> str:
    """The chained hash of one event."""
    document = {
        "prev": prev,
        "ts": format_timestamp(ts),
        "type": type,
        "actor": actor,
        "model": model,
        "contract_id": contract_id,
        "details": details,
    }
    return hashlib.sha256(canonical_json(document)).hexdigest()
