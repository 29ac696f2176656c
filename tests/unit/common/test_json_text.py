"""Repeated keys: proven absent by the text's quotation marks, else found and named exactly; the
paths of problems written out only for the few a reply names."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from service.common.errors import MAX_DETAILS, InvalidJson
from service.common.json_paths import MAX_TEXT, BoundedProblems, shorten, walk, written
from service.common.json_text import JsonText


def _refused(raw: bytes) -> InvalidJson:
    text = JsonText.of(raw, ("predictions", "labels"))
    with pytest.raises(InvalidJson) as info:
        text.check(orjson.loads(raw))
    return info.value


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": 1, "b": "x", "c": [1, 2], "s": ["y", 3], "d": {"e": [{"f": None}], "g": ""}},
        {"predictions": [{"id": "p", "cohort": {"k": "v"}, "logits": [1.5, 2]}] * 3},
        {"rows": [[1, 2], [3, 4]], "names": ["a", "b"], "empty": [], "nested": [[["s"]]]},
        {"": "", "unicode": "\u00e9\u4e2d\U0001f600", "colon:key": ":value"},
    ],
)
def test_a_text_without_repeated_keys_is_proven_by_its_quotes(value: dict[str, Any]) -> None:
    for raw in (
        orjson.dumps(value),
        json.dumps(value).encode(),
        json.dumps(value, indent=2).encode(),
    ):
        text = JsonText.of(raw)
        assert text.proves_unique_keys(orjson.loads(raw))
        text.check(orjson.loads(raw))


def test_an_escaped_quote_is_not_a_repeated_key() -> None:
    raw = b'{"id": "say \\"hi\\"", "b": "\\u0022", "c": "\\\\"}'
    text = JsonText.of(raw)
    assert not text.proves_unique_keys(orjson.loads(raw))
    text.check(orjson.loads(raw))


def test_a_quote_escaped_as_u0022_with_a_repeat_is_still_refused() -> None:
    # The escape adds a quote to the re-written value, the repeat takes two: the text is not
    # proven and the exact check finds the repeat.
    error = _refused(b'{"a": "\\u0022\\u0022", "b": 1, "b": 1}')
    assert [d.field for d in error.details] == ["b"]


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b'{"a": 1, "a": 1}', [("a", None, "the key appears 2 times in this object")]),
        (b'{"a": 1, "b": {"c": 1, "c": 2, "c": 3}}', [("b.c", None, "3 times")]),
        (
            b'{"predictions": [{"id": "x"}, {"id": "y", "logits": [1], "logits": [2]}]}',
            [("predictions[1].logits", 1, "2 times")],
        ),
        (
            b'{"labels": [[{"k": 1, "k": 1}]], "x": 1, "x": 2}',
            [("x", None, ""), ("labels[0][0].k", 0, "")],
        ),
        # Escapes that decode to the same key are the same key.
        (b'{"\\u0061": 1, "a": 2}', [("a", None, "")]),
    ],
)
def test_every_repeated_key_is_named_with_its_path_and_item(
    raw: bytes, named: list[tuple[str, int | None, str]]
) -> None:
    error = _refused(raw)
    assert error.code == "bad_request"
    got = [(d.field, d.item, d.message) for d in error.details]
    assert [(f, i) for f, i, _ in got] == [(f, i) for f, i, _ in named]
    assert all(words in message for (_, _, message), (_, _, words) in zip(got, named, strict=True))


def test_a_repeated_key_is_refused_even_where_its_quotes_balance_an_escaped_one() -> None:
    # The repeat drops two quotes from the decoded value and the escape adds one to the text:
    # the counts differ, so the exact check runs and finds the repeat.
    error = _refused(b'{"a": "\\"", "b": 1, "b": 1}')
    assert [d.field for d in error.details] == ["b"]


def test_many_repeats_under_a_long_key_make_a_bounded_error() -> None:
    key = "k" * 100_000
    pairs = ",".join(['"r": 1'] * 5_000)
    raw = ('{"' + key + '": [{' + pairs + "}, {" + pairs + "}]}").encode()
    error = _refused(raw)
    assert error.details_total == 2
    assert all(len(d.field) <= MAX_TEXT for d in error.details)
    many = ",".join(f'"k{i}": 1, "k{i}": 2' for i in range(3 * MAX_DETAILS))
    error = _refused(("{" + many + "}").encode())
    assert len(error.details) == MAX_DETAILS and error.details_total == 3 * MAX_DETAILS


def test_paths_are_written_only_when_named_and_stay_short() -> None:
    body = {"x" * 10_000: [{"y" * 10_000: "\ud800\x00"}]}
    nodes = list(walk(body))
    assert [node for _, _, node in nodes][-1] == "\ud800\x00"
    path = written(nodes[-1][0])
    assert len(path) <= MAX_TEXT and path.startswith("x" * 10) and path.endswith("y" * 10)
    assert written(None) == "(body)"
    key_path = written(((None, "a\x00\ud800"), 3))
    assert key_path == "a\\x00\\ud800[3]"


def test_walk_gives_batch_items_and_document_order() -> None:
    body = {"model": "m", "predictions": [{"id": "a"}, {"id": "b", "c": {"d": "e"}}], "z": [1]}
    got = [(written(p), item, node) for p, item, node in walk(body, ("predictions",))]
    assert got[0] == ("(body)", None, body)
    assert ("predictions[1].c.d", 1, "e") in got
    assert ("z[0]", None, 1) in got
    assert [g[0] for g in got if isinstance(g[2], str)] == [
        "model",
        "model",
        "predictions",
        "predictions[0].id",
        "predictions[0].id",
        "predictions[1].id",
        "predictions[1].id",
        "predictions[1].c",
        "predictions[1].c.d",
        "predictions[1].c.d",
        "z",
    ]


def test_bounded_problems_count_all_and_keep_the_first() -> None:
    problems = BoundedProblems()
    for i in range(1_000):
        problems.add_at(((None, "labels"), i), i % 7, "bad")
    assert problems.total == 1_000 and len(problems.details) == MAX_DETAILS
    assert problems.items == set(range(7))
    assert problems.details[0].field == "labels[0]"


def test_shorten_keeps_both_ends() -> None:
    assert shorten("abc", 5) == "abc"
    cut = shorten("a" * 50 + "b" * 50, 11)
    assert len(cut) == 11 and cut.startswith("aaaaa") and cut.endswith("bbbbb")
