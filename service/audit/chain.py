"""The audit chain: every event carries the hash of the one before it. No SQL, no Flask.

**Plain events.** ``sha256 = SHA-256(canonical JSON of {prev, ts, type, actor, model, contract_id,
details})`` where ``prev`` is the previous event's ``sha256`` (64 zeros for the first). Changing,
removing or reordering a stored event breaks every hash after it. Anyone who can write the table
can also recompute every later hash, though, and cutting the newest events leaves a chain that
still links: so the head (``seq`` and ``sha256``) is reported, and a head kept outside the
database (the *anchor*) can be checked to still be on the chain with the same hash.

**Keyed events** (``CALMON_AUDIT_KEY``). The same document under HMAC-SHA256 with the key, so
rewriting an event and its successors needs the key. A keyed segment starts with an
``audit_key_enabled`` event, itself keyed, whose ``details.key_id`` names the key by a
fingerprint that reveals nothing of it; every event after it is keyed with that key until the
next ``audit_key_enabled``. Appending under a key the chain's head is not already under first
writes that event (``calmon migrate`` writes it too, right after the key is set). Events written
before the first segment stay plain SHA-256: the key cannot protect them retroactively, only
seal them (the first keyed event hashes the last plain one); an anchor taken before the key was
set still covers them. With a key configured, ``verify`` requires the head to be keyed: a chain
rebuilt without the key as all-plain fails. The setting may list older keys after the current
one (``new,old``), so segments signed before a rotation still verify.

The chain vouches for the rows written with its events (contracts, gate decisions,
retirements): ``service.audit.records`` checks them against their events. A keyed log also
keeps a keyed head (``service.audit.head``), so events deleted from its end are seen.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from service.audit.events import AuditResealed, ContractRetired, KeyEnabled
from service.audit.verification import AnchorCheck, ChainCheck, ChainEnd
from service.common.hashing import canonical_json, sha256_of
from service.common.values import format_timestamp

GENESIS = "0" * 64
KEY_ENABLED = KeyEnabled.TYPE
#: The event ``calmon audit reseal`` writes before it signs a keyed head over the log.
RESEALED = AuditResealed.TYPE
RETIRED = ContractRetired.TYPE
#: Shortest key accepted: 32 characters (e.g. ``openssl rand -hex 32`` gives 64).
MIN_KEY_LENGTH = 32
_KEY_ID_MESSAGE = b"calmon audit key id"


class EventContent(Protocol):
    """What an event's hash covers besides the hash of the event before it."""

    @property
    def ts(self) -> datetime: ...
    @property
    def type(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def contract_id(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


def event_document(prev: str, event: EventContent) -> bytes:
    """The canonical bytes an event's hash is over."""
    return canonical_json(
        {
            "prev": prev,
            "ts": format_timestamp(event.ts),
            "type": event.type,
            "actor": event.actor,
            "model": event.model,
            "contract_id": event.contract_id,
            "details": event.details,
        }
    )


def event_digest(prev: str, event: EventContent, key: bytes | None = None) -> str:
    """The chained hash of one event: SHA-256, or HMAC-SHA256 under ``key``."""
    document = event_document(prev, event)
    if key is None:
        return hashlib.sha256(document).hexdigest()
    return hmac.new(key, document, hashlib.sha256).hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


@dataclass(frozen=True)
class AuditKey:
    """One HMAC key and its public fingerprint (``key_id``)."""

    secret: bytes = field(repr=False)
    key_id: str

    @classmethod
    def from_text(cls, text: str) -> AuditKey:
        secret = text.encode("utf-8")
        return cls(secret, hmac.new(secret, _KEY_ID_MESSAGE, hashlib.sha256).hexdigest()[:16])


@dataclass(frozen=True)
class AuditKeyring:
    """The configured keys: the first signs new events, every one verifies its segments."""

    keys: tuple[AuditKey, ...] = ()

    @classmethod
    def from_setting(cls, value: str | None) -> AuditKeyring:
        """Parse ``CALMON_AUDIT_KEY`` (comma-separated, newest first); raise ``ValueError``."""
        texts = [t.strip() for t in (value or "").split(",") if t.strip()]
        if any(len(t) < MIN_KEY_LENGTH for t in texts):
            raise ValueError(
                f"CALMON_AUDIT_KEY: every key needs at least {MIN_KEY_LENGTH} characters "
                "(e.g. `openssl rand -hex 32`)"
            )
        return cls(tuple(AuditKey.from_text(t) for t in texts))

    @property
    def signing(self) -> AuditKey | None:
        return self.keys[0] if self.keys else None

    def get(self, key_id: Any) -> AuditKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)


NO_KEYS = AuditKeyring()


def retirement_document(
    contract_id: str, reason: str, retired_at: datetime | str, retired_by: str
) -> dict[str, str]:
    """A retirement row as the JSON its audit event carries."""
    return {
        "contract_id": contract_id,
        "reason": reason,
        "retired_at": retired_at if isinstance(retired_at, str) else format_timestamp(retired_at),
        "retired_by": retired_by,
    }


def retirement_sha256(document: Mapping[str, Any]) -> str:
    return sha256_of(document)


class ChainEvent(EventContent, Protocol):
    """What the verifier reads of a stored event."""

    @property
    def seq(self) -> int: ...
    @property
    def details(self) -> dict[str, Any]: ...
    @property
    def prev_sha256(self) -> str: ...
    @property
    def sha256(self) -> str: ...


@dataclass(frozen=True)
class RetirementRow:
    contract_id: str
    reason: str
    retired_at: datetime
    retired_by: str


@dataclass(frozen=True)
class Anchor:
    """A head kept outside the database: ``seq`` must still be on the chain with ``sha256``."""

    seq: int
    sha256: str


@dataclass
class _Failure:
    seq: int | None
    reason: str


@dataclass
class ChainVerifier:
    """Walks the chain event by event (oldest first), then reports.

    Hash checks stop at the first event that does not fit (nothing after it can be trusted);
    the walk still counts every event and notes the head, the anchor's event and the event at
    ``head_seq`` (the seq the keyed head names).
    """

    keyring: AuditKeyring = NO_KEYS
    anchor: Anchor | None = None
    head_seq: int | None = None
    _prev: str = GENESIS
    _count: int = 0
    _segment: AuditKey | None = None
    _keyed_from: int | None = None
    _failure: _Failure | None = None
    _head: ChainEvent | None = None
    _anchor_sha256: str | None = None
    _sha256_at_head_seq: str | None = None

    def feed(self, event: ChainEvent) -> None:
        self._head = event
        self._count += 1
        if self.anchor is not None and event.seq == self.anchor.seq:
            self._anchor_sha256 = event.sha256
        if event.seq == self.head_seq:
            self._sha256_at_head_seq = event.sha256
        if self._failure is None:
            self._check(event)

    @property
    def events(self) -> int:
        """How many events were fed."""
        return self._count

    @property
    def head(self) -> ChainEvent | None:
        """The last event fed."""
        return self._head

    @property
    def hashes_match(self) -> bool:
        """Whether every event fed links to its predecessor and matches its hash (the chain
        can still be invalid: under a key, when no event is keyed)."""
        return self._failure is None

    @property
    def sha256_at_head_seq(self) -> str | None:
        """The hash of the event at ``head_seq``, if one was fed."""
        return self._sha256_at_head_seq

    def _check(self, event: ChainEvent) -> None:
        if event.type == KEY_ENABLED:
            key_id = KeyEnabled.read(event.details).key_id
            key = self.keyring.get(key_id)
            if key is None:
                self._failure = _Failure(
                    event.seq,
                    f"the event starts a segment keyed with key id {key_id}, which is not "
                    "configured: set CALMON_AUDIT_KEY to that key to verify it",
                )
                return
            self._segment = key
            self._keyed_from = self._keyed_from or event.seq
        if event.prev_sha256 != self._prev:
            self._failure = _Failure(event.seq, "the event does not link to its predecessor")
            return
        expected = self._digest(event, self._segment)
        if not _same(event.sha256, expected):
            if self._segment is not None and _same(event.sha256, self._digest(event, None)):
                reason = (
                    f"the event is plain SHA-256 inside the segment keyed from seq "
                    f"{self._keyed_from}: written by a process without CALMON_AUDIT_KEY, or "
                    "rewritten by someone without the key"
                )
            else:
                reason = "the event's content does not match its hash"
            self._failure = _Failure(event.seq, reason)
            return
        self._prev = event.sha256

    def _digest(self, event: ChainEvent, key: AuditKey | None) -> str:
        return event_digest(self._prev, event, None if key is None else key.secret)

    def chain_report(self) -> ChainCheck:
        """The chain's section of the report: valid, the first event that does not fit and why,
        the hashing scheme of the head and the keyed segment."""
        failure = self._chain_failure()
        return ChainCheck(
            valid=failure is None,
            first_invalid_seq=None if failure is None else failure.seq,
            reason=None if failure is None else failure.reason,
            scheme="hmac-sha256" if self._segment is not None else "sha256",
            keyed_from_seq=self._keyed_from,
            key_id=None if self._segment is None else self._segment.key_id,
        )

    def head_report(self) -> ChainEnd | None:
        head = self._head
        return None if head is None else ChainEnd(head.seq, head.sha256, head.ts)

    def _chain_failure(self) -> _Failure | None:
        if self._failure is not None:
            return self._failure
        head = self._head
        if self.keyring.signing is not None and head is not None and self._segment is None:
            return _Failure(
                head.seq,
                "CALMON_AUDIT_KEY is set but no event is keyed: nothing has been written since "
                "the key was set (`calmon migrate` writes the first keyed event), or the keyed "
                "events were rewritten without the key",
            )
        return None

    def anchor_report(self) -> AnchorCheck | None:
        anchor = self.anchor
        if anchor is None:
            return None
        head_seq = 0 if self._head is None else self._head.seq
        if self._anchor_sha256 is None:
            reason = (
                f"the chain ends at seq {head_seq}, before the anchor: newer events were deleted"
                if head_seq < anchor.seq
                else "the anchored event is no longer on the chain: it was deleted"
            )
        elif not _same(self._anchor_sha256, anchor.sha256):
            reason = (
                f"the anchored event's hash is now {self._anchor_sha256}: the chain up to it "
                "was rewritten"
            )
        else:
            reason = None
        return AnchorCheck(anchor.seq, anchor.sha256, valid=reason is None, reason=reason)
