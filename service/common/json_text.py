"""No object of a body may repeat a key (I-JSON, RFC 7493 section 2.3): JSON parsers disagree on
which of two values they keep, so calmon refuses the body instead of guessing.

orjson keeps the last value without a word, so the rule is checked against the raw text, and
cheaply: every key and every string of a JSON text is written between two quotation marks, and a
quotation mark inside a string is escaped as ``\\"`` (one more) or as ``\\u0022`` (none). The
decoded value written out again by orjson (which escapes a quote as ``\\"``) holds as many
quotation marks as the text unless a repeat was dropped (at least a key's two fewer) or the text
wrote a quote as ``\\u0022``. So when the text holds no ``\\u0022`` and both counts agree, no key
was repeated; otherwise the exact check, a second parse that keeps every key, names each one
repeated. Both run on the whole body when it is read, before any route looks anything up.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from service.common.errors import InvalidJson
from service.common.json_paths import BoundedProblems, walk

_QUOTE = ord('"')
#: A quotation mark written as an escape the re-written value spells ``\\"``.
_ESCAPED_QUOTE = b"\\u0022"
#: orjson's integer range; the standard library's parser is told to keep the same one.
_INT_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class JsonText:
    """A body's raw JSON text, kept to hold its decoded value to the rule on repeated keys;
    ``batch_keys`` name the top-level lists whose elements the error details give as ``item``.
    """

    raw: bytes
    batch_keys: frozenset[str] = frozenset()

    @classmethod
    def of(cls, raw: bytes, batch_keys: Collection[str] = ()) -> JsonText:
        return cls(raw, frozenset(batch_keys))

    def proves_unique_keys(self, value: Any) -> bool:
        """Whether the quotation marks prove that no object of the text repeats a key;
        ``value`` is the text decoded (False: unproven, not refuted)."""
        if _ESCAPED_QUOTE in self.raw:
            return False
        try:
            again = orjson.dumps(value)
        except TypeError:
            return False
        return _quotes(again) == _quotes(self.raw)

    def check(self, value: Any) -> None:
        """Raise ``InvalidJson`` if an object of the text repeats a key; ``value`` is the text
        decoded."""
        if not self.proves_unique_keys(value):
            self.refuse_repeated_keys()

    def refuse_repeated_keys(self) -> None:
        """The exact check: parse the text again keeping every key, and raise ``InvalidJson``
        naming each key an object repeats (with how often), if any."""
        try:
            value = json.loads(
                self.raw.decode("utf-8"),
                object_pairs_hook=_object,
                parse_constant=float,
                parse_int=orjson_int,
            )
        except RecursionError:
            raise InvalidJson("body is nested too deeply") from None
        problems = BoundedProblems()
        for path, item, node in walk(value, self.batch_keys):
            if isinstance(node, _Repeating):
                for key, times in node.repeated.items():
                    message = f"the key appears {times} times in this object"
                    problems.add_at((path, key), item, message)
        if problems:
            raise InvalidJson(
                "body repeats a key within an object: keys must be unique (I-JSON)",
                problems.details,
                details_total=problems.total,
                items=len(problems.items),
            )


class _Repeating(dict[str, Any]):
    """An object of the text that repeats keys: ``repeated`` maps each to its count."""

    repeated: dict[str, int]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    repeating = _Repeating(found)
    counts: dict[str, int] = {}
    for key, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    repeating.repeated = {key: n for key, n in counts.items() if n > 1}
    return repeating


def orjson_int(text: str) -> int | float:
    """A JSON integer as orjson reads it: an int within 64 bits, else a float (an infinity when
    no float64 holds it), for the standard library's parser (``parse_int``)."""
    number = int(text)
    low, high = _INT_RANGE
    return number if low <= number <= high else float(text)


def _quotes(text: bytes) -> int:
    """How many quotation marks ``text`` holds."""
    return int(np.count_nonzero(np.frombuffer(text, dtype=np.uint8) == _QUOTE))
