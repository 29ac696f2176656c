"""Paths into a decoded JSON body, written out only for the problems a reply names, and a bounded
list of those problems.

A body of a few megabytes can hold millions of problems under keys of a megabyte each: a path
written out for every one of them would take terabytes. So a path is a chain of ``(parent, key
or index)`` links (``None`` is the body itself), which costs one tuple per node however long
its ancestors' keys are; ``BoundedProblems`` writes out the paths of the first ``MAX_DETAILS``
problems, each key in them cut to ``MAX_KEY`` characters and the whole to ``MAX_TEXT``, and only
counts the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from service.common.errors import MAX_DETAILS, ErrorCollector

#: The most characters of any text an error reply quotes (a message, a field path).
MAX_TEXT = 300
#: The most characters of one key that a written-out path quotes.
MAX_KEY = 64
#: What marks the place where a text was shortened.
ELISION = "\u2026"

#: A node's place in a decoded body: ``(parent path, key or index)``, ``None`` for the body.
JsonPath = tuple[Any, str | int] | None


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and end around an
    ellipsis, ``limit`` characters in all (a path keeps its item and its last field)."""
    if len(text) <= limit:
        return text
    head = (limit - len(ELISION) + 1) // 2
    tail = limit - len(ELISION) - head
    return text[:head] + ELISION + (text[-tail:] if tail else "")


def walk(
    value: Any, batch_keys: Collection[str] = ()
) -> Iterator[tuple[JsonPath, int | None, Any]]:
    """Every node of a decoded body, in document order, with its path and batch item (its index
    within a top-level list named in ``batch_keys``, if it lies in one): each object and list
    before what it holds, and each key of an object as a node at its own path just before its
    value.

    Iterative, one frame per level of nesting: a body nests as deep as the parser allows, and a
    list of millions of items costs no more than one.
    """
    yield None, None, value
    if not isinstance(value, dict | list):
        return
    stack = [_children(value, None, None, batch_keys)]
    while stack:
        for path, item, child in stack[-1]:
            yield path, item, child
            if isinstance(child, dict | list):
                stack.append(_children(child, path, item, batch_keys))
                break
        else:
            stack.pop()


def _children(
    node: dict[str, Any] | list[Any],
    where: JsonPath,
    item: int | None,
    batch_keys: Collection[str],
) -> Iterator[tuple[JsonPath, int | None, Any]]:
    """The keys and values of an object, or the elements of a list, with their paths."""
    if isinstance(node, dict):
        for key, child in node.items():
            path = (where, key)
            yield path, item, key
            yield path, item, child
        return
    batch = where is not None and where[0] is None and where[1] in batch_keys
    for i, child in enumerate(node):
        yield (where, i), i if batch else item, child


def written(path: JsonPath) -> str:
    """A path as ``predictions[3].cohort.region`` (``(body)`` for the body itself): each key
    cut to ``MAX_KEY`` characters, a NUL or a lone surrogate in it written as an escape, the
    whole shortened to ``MAX_TEXT`` characters."""
    segments: list[str | int] = []
    while path is not None:
        path, segment = path
        segments.append(segment)
    out: list[str] = []
    for segment in reversed(segments):
        if isinstance(segment, int):
            out.append(f"[{segment}]")
            continue
        key = shorten(segment, MAX_KEY)
        key = key.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
        out.append(f".{key}" if out else key)
    return shorten("".join(out)) or "(body)"


class BoundedProblems(ErrorCollector):
    """An ``ErrorCollector`` of problems found at paths into a body: a path is written out only
    for the problems kept."""

    def add_at(self, path: JsonPath, item: int | None, message: str) -> None:
        self.add(written(path) if len(self.details) < MAX_DETAILS else "", message, item)
