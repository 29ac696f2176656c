"""The keyed head of the audit log: what a keyed log must end at. No SQL.

A hash chain proves each event follows the one before it, but not that nothing came after the
last one: deleting the newest events (or all of them) leaves a chain that still links. Under
``CALMON_AUDIT_KEY`` the log therefore keeps one more record, its *keyed head*: the number of
events, the last event's ``seq`` and ``sha256``, and the id of the key that signed an
HMAC-SHA256 over them. Every keyed append advances it in the same transaction as the event, so
a keyed log is valid only if it ends exactly where its head says. Rewriting the head to match a
shortened log needs the key; deleting the head is reported too, because with a key configured
the head must exist. A head is written when the log first comes under a key (``calmon
migrate``); over a keyed log only by an administrator's ``calmon audit reseal --i-know``, which
records itself as an ``audit_resealed`` event.

What it cannot see: a head and log restored together to an earlier moment (a backup, or a copy
of an older head row kept by whoever truncates) still match; a log whose keyed events were all
deleted together with its head looks like a log never keyed, which ``calmon migrate`` keys
afresh. An anchor kept outside the database covers both (``Anchor`` in
``service.audit.chain``).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from service.audit.chain import AuditKey, AuditKeyring, ChainVerifier
from service.common.hashing import canonical_json

_PURPOSE = "calmon audit head"


def head_mac(key: AuditKey, *, events: int, seq: int, sha256: str) -> str:
    """HMAC-SHA256 under ``key`` of the head's canonical JSON (its purpose, counts and key id)."""
    document = canonical_json(
        {"purpose": _PURPOSE, "events": events, "seq": seq, "sha256": sha256, "key_id": key.key_id}
    )
    return hmac.new(key.secret, document, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class KeyedHead:
    """The stored head: ``events`` in the log, the last one's ``seq`` and ``sha256``, the id of
    the key whose ``mac`` covers them."""

    events: int
    seq: int
    sha256: str
    key_id: str
    mac: str

    @classmethod
    def sign(cls, key: AuditKey, *, events: int, seq: int, sha256: str) -> KeyedHead:
        return cls(
            events, seq, sha256, key.key_id, head_mac(key, events=events, seq=seq, sha256=sha256)
        )

    def authentic(self, keyring: AuditKeyring) -> bool:
        """Whether a configured key signed exactly these values."""
        key = keyring.get(self.key_id)
        if key is None:
            return False
        expected = head_mac(key, events=self.events, seq=self.seq, sha256=self.sha256)
        return hmac.compare_digest(expected.encode(), self.mac.encode())

    def vouches_for(self, keyring: AuditKeyring, last_sha256: str) -> bool:
        """Whether the head is authentic and ends at the event with ``last_sha256``: only then
        does an append advance it (a head that no longer matches stays as evidence)."""
        return self.authentic(keyring) and hmac.compare_digest(
            self.sha256.encode(), last_sha256.encode()
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "events": self.events,
            "seq": self.seq,
            "sha256": self.sha256,
            "key_id": self.key_id,
        }


@dataclass(frozen=True)
class LogEnd:
    """Where the walked log ends: its event count, its last event (None when empty), and the
    hash the event at the head's ``seq`` has (None when no event has that seq)."""

    events: int
    last_seq: int | None
    last_sha256: str | None
    sha256_at_head_seq: str | None


def log_end(verifier: ChainVerifier) -> LogEnd:
    """Where the log ``verifier`` walked ends (``head_seq`` set to the stored head's seq)."""
    last = verifier.head
    return LogEnd(
        events=verifier.events,
        last_seq=None if last is None else last.seq,
        last_sha256=None if last is None else last.sha256,
        sha256_at_head_seq=verifier.sha256_at_head_seq,
    )


def head_problem(head: KeyedHead | None, keyring: AuditKeyring, end: LogEnd) -> str | None:
    """Why a keyed log does not end at its keyed head, or None when it does."""
    if head is None:
        return (
            "CALMON_AUDIT_KEY is set but the log has no keyed head: a log not keyed yet gets "
            "one from `calmon migrate`, with its first keyed event; a keyed log lost it (it "
            "was deleted, with or without the newest events) or was keyed before calmon kept "
            "one, and only `calmon audit reseal --i-know` writes one over it"
        )
    if keyring.get(head.key_id) is None:
        return (
            f"the keyed head is signed with key id {head.key_id}, which is not configured: set "
            "CALMON_AUDIT_KEY to that key to verify it"
        )
    if not head.authentic(keyring):
        return "the keyed head does not match its HMAC: it was rewritten without the key"
    said = f"the keyed head vouches for {head.events} events up to seq {head.seq}"
    if end.last_seq is None:
        return f"{said}, but the log is empty: its events were deleted"
    if end.last_seq < head.seq:
        return f"{said}, but the log ends at seq {end.last_seq}: the newest events were deleted"
    if end.sha256_at_head_seq is None:
        return f"{said}, but no event has seq {head.seq} any more: it was deleted"
    if not hmac.compare_digest(end.sha256_at_head_seq.encode(), head.sha256.encode()):
        return f"{said}, but the event at seq {head.seq} now hashes differently: it was rewritten"
    if end.last_seq > head.seq:
        return (
            f"{said}, but the log goes on to seq {end.last_seq}: events were appended without "
            "advancing the head (by a process without CALMON_AUDIT_KEY, or by hand)"
        )
    if end.events != head.events:
        return f"{said}, but the log holds {end.events}: events before it were deleted"
    return None
