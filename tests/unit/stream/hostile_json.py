"""Hypothesis strategies of hostile JSON values for the batch validation tests: every JSON type,
integers past float64, odd text (empty, blank, NUL, lone surrogates, over-long)."""

from __future__ import annotations

from hypothesis import strategies as st

from service.stream.batch_bodies import MAX_ID_LENGTH

ODD_TEXT = st.sampled_from(
    ["", " ", "\t", "a\x00b", "a\ud800", "x" * (MAX_ID_LENGTH + 1), "é", "😀", "\u2028"]
)
TEXT = st.one_of(st.text(min_size=0, max_size=8), ODD_TEXT)
JSON_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
#: Timestamps as sent: valid, zone-less, too early, too late, impossible dates, other types.
STAMPS = st.one_of(
    st.sampled_from(
        [
            "2026-11-30T11:00:00Z",
            "2026-11-30T11:00:00.123456+02:00",
            "2026-11-30T11:00:00",
            "1999-12-31T23:59:59Z",
            "2026-12-02T12:00:01Z",
            "2026-11-30 11:00:00Z",
            "2026-02-30T11:00:00Z",
        ]
    ),
    JSON_ANY,
)
