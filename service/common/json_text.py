"""No object of a body may repeat a key (I-JSON, RFC 7493 section 2.3): JSON parsers disagree on
which of two values they keep, so calmon refuses the body instead of guessing.

orjson keeps the last value without a word, so the rule is checked against the raw text, and
cheaply: every key and every string of a JSON text is written between two quotation marks, and a
quotation mark inside a string is escaped (``\\"``), adding one more. So when the decoded value
holds exactly half as many keys and strings as the text holds quotation marks, no key was
repeated (and no string held an escaped quote). A tally may count fewer than all (it may skip a
list it takes for numbers) but never more: a shortfall only sends the text to the exact check,
a second parse that keeps every key and names each one repeated.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.common.errors import InvalidJson
from service.common.json_paths import BoundedProblems, walk

_QUOTE = ord('"')
#: orjson's integer range; the standard library's parser is told to keep the same one.
_INT_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class JsonText:
    """A body's raw JSON text, kept to hold its decoded value to the rule on repeated keys.

    ``quotes`` counts the text's quotation marks; ``tallied`` counts keys and strings a caller
    has already accounted for (a batch's envelope, before its items are tallied);
    ``batch_keys`` name the top-level lists whose elements the error details give as ``item``.
    """

    raw: bytes
    quotes: int
    tallied: int = 0
    batch_keys: frozenset[str] = frozenset()

    @classmethod
    def of(cls, raw: bytes, batch_keys: Collection[str] = ()) -> JsonText:
        quotes = int(np.count_nonzero(np.frombuffer(raw, dtype=np.uint8) == _QUOTE))
        return cls(raw, quotes, 0, frozenset(batch_keys))

    def plus(self, tally: int) -> JsonText:
        """This text with ``tally`` more of its keys and strings accounted for."""
        return replace(self, tallied=self.tallied + tally)

    def proves_unique_keys(self, tally: int) -> bool:
        """Whether ``tally`` keys and strings (beyond those already tallied) prove that no
        object of the text repeats a key (False: unproven, not refuted)."""
        return self.quotes == 2 * (self.tallied + tally)

    def check(self, value: Any) -> None:
        """Raise ``InvalidJson`` if an object of the text repeats a key; ``value`` is the text
        decoded."""
        if not self.proves_unique_keys(tally(value)):
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


def tally(value: Any) -> int:
    """How many keys and strings ``value`` holds, or fewer: a list whose first element is not a
    string, an object or a list is taken for numbers and not looked into (a fit's rows of
    logits cost one look per row)."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            count += 1
        elif isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list) and node and isinstance(node[0], str | dict | list):
            stack.extend(node)
    return count
