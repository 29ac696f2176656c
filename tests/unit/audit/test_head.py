"""The keyed head's rules: where a keyed log must end, and each way it can fail to."""

from __future__ import annotations

import pytest

from service.audit.chain import NO_KEYS, AuditKey, AuditKeyring
from service.audit.head import KeyedHead, LogEnd, head_problem

KEY = AuditKey.from_text("h" * 40)
OTHER = AuditKey.from_text("o" * 40)
KEYRING = AuditKeyring((KEY,))
HEAD = KeyedHead.sign(KEY, events=5, seq=7, sha256="a" * 64)


def at(events: int, last_seq: int | None, last: str | None, at_head: str | None) -> LogEnd:
    return LogEnd(events, last_seq, last, at_head)


def test_a_log_that_ends_at_its_head_is_valid() -> None:
    assert head_problem(HEAD, KEYRING, at(5, 7, "a" * 64, "a" * 64)) is None
    assert HEAD.vouches_for(KEYRING, "a" * 64)
    assert not HEAD.vouches_for(KEYRING, "b" * 64)
    assert not HEAD.vouches_for(NO_KEYS, "a" * 64)


@pytest.mark.parametrize(
    "head, keyring, end, expected",
    [
        (None, KEYRING, at(5, 7, "a" * 64, None), "has no keyed head"),
        (HEAD, AuditKeyring((OTHER,)), at(5, 7, "a" * 64, "a" * 64), "which is not configured"),
        (
            KeyedHead(6, 7, "a" * 64, HEAD.key_id, HEAD.mac),
            KEYRING,
            at(5, 7, "a" * 64, "a" * 64),
            "does not match its HMAC",
        ),
        (HEAD, KEYRING, at(0, None, None, None), "the log is empty"),
        (HEAD, KEYRING, at(4, 6, "b" * 64, None), "the newest events were deleted"),
        (HEAD, KEYRING, at(5, 8, "c" * 64, None), "no event has seq 7 any more"),
        (HEAD, KEYRING, at(5, 7, "c" * 64, "c" * 64), "now hashes differently"),
        (HEAD, KEYRING, at(6, 8, "c" * 64, "a" * 64), "appended without advancing the head"),
        (HEAD, KEYRING, at(4, 7, "a" * 64, "a" * 64), "the log holds 4"),
    ],
)
def test_each_way_a_keyed_log_misses_its_head_is_named(
    head: KeyedHead | None, keyring: AuditKeyring, end: LogEnd, expected: str
) -> None:
    problem = head_problem(head, keyring, end)
    assert problem is not None and expected in problem


def test_the_mac_covers_every_value_and_the_key() -> None:
    macs = {
        KeyedHead.sign(KEY, events=5, seq=7, sha256="a" * 64).mac,
        KeyedHead.sign(KEY, events=6, seq=7, sha256="a" * 64).mac,
        KeyedHead.sign(KEY, events=5, seq=8, sha256="a" * 64).mac,
        KeyedHead.sign(KEY, events=5, seq=7, sha256="b" * 64).mac,
        KeyedHead.sign(OTHER, events=5, seq=7, sha256="a" * 64).mac,
    }
    assert len(macs) == 5
    assert "h" * 40 not in repr(HEAD)
