"""The label batch's fast path agrees with the declared item-by-item validation.

A batch the fast path accepts must be one the declaration accepts, with the same ids, labels,
timestamps, positions and in-batch repeats; a batch it doubts falls back to the declaration, so
the verdict and every error, item by item, are the declaration's. Hypothesis draws batches of
valid and spoiled items: every JSON type where each field goes, labels by index and by name,
repeated ids, edge numbers and odd text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.common.errors import ValidationFailed
from service.stream import batch_columns as batches
from service.stream.batch_bodies import MAX_ID_LENGTH
from service.stream.batch_columns import parse_labels
from service.stream.column_checks import LabelBatch, parse_labels_declared
from tests.unit.stream.hostile_json import JSON_ANY, ODD_TEXT, STAMPS

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
K = 3
INDEX_OF = {"cat": 0, "dog": 1, "owl": 2}

IDS = st.one_of(ODD_TEXT, st.from_regex(r"[a-z0-9_-]{1,6}", fullmatch=True), JSON_ANY)
LABELS = st.one_of(
    st.integers(0, K - 1),
    st.sampled_from(sorted(INDEX_OF)),
    st.sampled_from([K, -1, True, False, 1.0, 0.0, "Cat", "", "bird", 10**400, None]),
    JSON_ANY,
)


def valid_items() -> st.SearchStrategy[dict[str, Any]]:
    """A well-formed label: a short id (repeats likely), a class index or name, a time."""
    return st.fixed_dictionaries(
        {
            "id": st.sampled_from(["a", "b", "c", "d"]),
            "label": st.one_of(st.integers(0, K - 1), st.sampled_from(sorted(INDEX_OF))),
            "ts": st.just("2026-11-30T11:00:00Z"),
        }
    )


@st.composite
def label_batches(draw: st.DrawFn) -> list[Any]:
    """Valid labels with up to two spoiled: a field replaced or dropped, a key added, or the
    item replaced by another JSON value."""
    items: list[Any] = draw(st.lists(valid_items(), min_size=1, max_size=5))
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        i = draw(st.integers(0, len(items) - 1))
        how = draw(st.sampled_from(["replace", "replace", "drop", "extra", "not an object"]))
        if how == "not an object":
            items[i] = draw(JSON_ANY)
        elif not isinstance(items[i], dict):
            continue
        elif how == "drop" and items[i]:
            items[i].pop(draw(st.sampled_from(sorted(items[i]))))
        elif how == "extra":
            items[i][draw(st.sampled_from(["score", "extra", "cohort"]))] = draw(JSON_ANY)
        else:
            field = draw(st.sampled_from(["id", "label", "ts"]))
            strategy = {"id": IDS, "label": LABELS, "ts": STAMPS}[field]
            items[i][field] = draw(strategy)
    return items


def outcome(items: list[Any], *, declared_only: bool) -> tuple[str, Any]:
    """('ok', batch) or ('invalid', [(field, item, message)]), by the served path or by the
    declaration item by item."""
    parse = parse_labels_declared if declared_only else parse_labels
    try:
        return "ok", parse(items, index_of=INDEX_OF, n_classes=K, now=NOW)
    except ValidationFailed as error:
        return "invalid", [(d.field, d.item, d.message) for d in error.details]


def same_batch(a: LabelBatch, b: LabelBatch) -> bool:
    def fields(batch: LabelBatch) -> tuple[Any, ...]:
        return (batch.ids, batch.labels, batch.ts, batch.items, batch.repeats)

    return fields(a) == fields(b)


def check(items: list[Any]) -> bool:
    """Both paths agree; returns whether the fast path took the batch itself."""
    declared = outcome(items, declared_only=True)
    fast = batches._parse_labels_fast(items, INDEX_OF, K, NOW)
    if fast is not None:
        assert declared[0] == "ok", (items, declared)
        assert same_batch(fast, declared[1]), items
    served = outcome(items, declared_only=False)
    assert served[0] == declared[0], (items, served, declared)
    if served[0] == "ok":
        assert same_batch(served[1], declared[1]), items
    else:
        assert served[1] == declared[1], items
    return fast is not None


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(label_batches())
def test_label_batches_get_the_declared_verdict_and_errors(items: list[Any]) -> None:
    check(items)


EDGE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    2,
    3,
    -1,
    1.0,
    10**400,
    "",
    " ",
    "\t\n",
    "a\x00b",
    "a\ud800",
    "x" * (MAX_ID_LENGTH + 1),
    "x" * MAX_ID_LENGTH,
    "cat",
    "Cat",
    "2026-11-30T11:00:00Z",
    "2026-11-30T11:00:00",
    "1999-12-31T23:59:59Z",
    "2026-12-31T00:00:00Z",
    [],
    [0],
    {},
    {"label": 0},
]


@pytest.mark.parametrize("field", ["id", "label", "ts", "extra"])
def test_every_edge_value_in_every_field_gets_the_declared_verdict(field: str) -> None:
    clean = {"id": "a", "label": "dog", "ts": "2026-11-30T11:00:00Z"}
    for value in EDGE_VALUES:
        check([clean, {**clean, "id": "b", field: value}])


def test_clean_batches_take_the_fast_path_with_repeats_set_apart() -> None:
    items = [
        {"id": "a", "label": 0, "ts": "2026-11-30T11:00:00Z"},
        {"id": "b", "label": "owl", "ts": "2026-11-30T11:30:00+01:00"},
        {"id": "a", "label": "dog", "ts": "2026-11-30T11:00:00Z"},
    ]
    assert check(items), "a clean batch is the fast path's to take"
    verdict, batch = outcome(items, declared_only=False)
    assert verdict == "ok"
    assert batch.ids == ["a", "b"] and batch.items == [0, 1]
    assert [label.as_sent() for label in batch.labels] == [0, "owl"]
    assert [(ident, label.as_sent()) for ident, label in batch.repeats] == [("a", "dog")]


def test_a_batch_of_many_bad_labels_gets_the_declared_details_and_totals() -> None:
    """More problems than a reply lists, of every kind an item can have: the details are the
    declaration's first, and the totals, counted from the columns, are the declaration's."""
    clean = {"id": "a", "label": "dog", "ts": "2026-11-30T11:00:00Z"}
    spoilers: list[Any] = [
        {**clean, "id": ""},
        {**clean, "label": "bird", "extra": 1, "score": 2},
        {"label": 5},
        7,
        {**clean, "ts": "yesterday", "id": None},
        clean,
    ]
    items = [spoilers[i % len(spoilers)] for i in range(500)]

    def reply(parse: Any) -> tuple[Any, ...]:
        try:
            parse(items, index_of=INDEX_OF, n_classes=K, now=NOW)
        except ValidationFailed as error:
            details = [(d.field, d.item, d.message) for d in error.details]
            return details, error.details_total, error.items
        raise AssertionError("the batch is refused")

    declared = reply(parse_labels_declared)
    assert reply(parse_labels) == declared
    assert declared[1] > 100
