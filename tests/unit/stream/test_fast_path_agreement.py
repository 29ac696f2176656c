"""The prediction batch's column checks agree with the declared item-by-item validation.

A batch the fast path accepts must be one the declaration accepts, with the same ids,
timestamps, cohorts and numbers; a batch it doubts is refused with the declaration's reply (its
verdict and every error, item by item, and the totals when there are more than a reply lists).
Hypothesis draws batches of valid and invalid items: every JSON type where each field goes, edge
numbers and odd text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.errors import MAX_DETAILS, ValidationFailed
from service.stream import column_checks
from service.stream.batch_bodies import MAX_ID_LENGTH
from service.stream.batch_columns import _parse_predictions_fast, parse_predictions
from service.stream.column_checks import PredictionBatch, parse_predictions_declared
from tests.unit.stream.hostile_json import JSON_ANY, ODD_TEXT, STAMPS, TEXT

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
K = 3

IDS = st.one_of(
    ODD_TEXT,
    st.sampled_from(["a b", " x ", "\u2028", "a\ud800b", "\x00"]),
    st.from_regex(r"[a-z0-9_-]{1,12}", fullmatch=True),
    TEXT,
    JSON_ANY,
)
NUMBER = st.one_of(
    st.floats(-MAX_ABS_LOGIT, MAX_ABS_LOGIT, allow_nan=False),
    st.sampled_from([MAX_ABS_LOGIT, -MAX_ABS_LOGIT, MAX_ABS_LOGIT * 1.01, 0, 1, True, 10**400]),
)
LOGITS = st.one_of(st.lists(NUMBER, min_size=K, max_size=K), st.lists(NUMBER, max_size=4), JSON_ANY)
SCORES = st.one_of(
    st.floats(0, 1), st.sampled_from([0, 1, -0.0, 1.0000001, -1e-300, True, 2]), JSON_ANY
)
COHORTS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["region", "tier", "_x", "9bad", "a b", ""]),
        st.one_of(st.sampled_from(["emea", "apac", "", " ", "a\x00"]), JSON_ANY),
        max_size=2,
    ),
    JSON_ANY,
)


def valid_items(value_key: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A well-formed item."""
    return st.fixed_dictionaries(
        {
            "id": st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
            "ts": st.just("2026-11-30T11:00:00Z"),
            value_key: values,
        },
        optional={
            "cohort": st.dictionaries(
                st.sampled_from(["region", "tier"]), st.sampled_from(["emea", "apac"]), max_size=2
            )
        },
    )


def hostile(value_key: str) -> st.SearchStrategy[tuple[str, Any]]:
    """A (field, value) to put into one item: an odd value where each field goes."""
    other = "score" if value_key == "logits" else "logits"
    values = LOGITS if value_key == "logits" else SCORES
    return st.one_of(
        st.tuples(st.just("id"), IDS),
        st.tuples(st.just("ts"), STAMPS),
        st.tuples(st.just("cohort"), COHORTS),
        st.tuples(st.just(value_key), values),
        st.tuples(st.sampled_from([other, "extra"]), JSON_ANY),
    )


@st.composite
def batches(draw: st.DrawFn, value_key: str, values: st.SearchStrategy[Any]) -> list[Any]:
    """Valid items with up to two of them spoiled: a field replaced, dropped, or the item
    itself replaced by another JSON value."""
    items = draw(st.lists(valid_items(value_key, values), min_size=1, max_size=4))
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
        i = draw(st.integers(0, len(items) - 1))
        how = draw(st.sampled_from(["replace", "replace", "replace", "drop", "not an object"]))
        if how == "not an object":
            items[i] = draw(JSON_ANY)
        elif isinstance(items[i], dict) and items[i] and how == "drop":
            items[i].pop(draw(st.sampled_from(sorted(items[i]))))
        elif isinstance(items[i], dict):
            field, value = draw(hostile(value_key))
            items[i][field] = value
    return items


def outcome(parse: Any) -> tuple[str, Any]:
    """('ok', batch) or ('invalid', [(field, item, message)])."""
    try:
        return "ok", parse()
    except ValidationFailed as error:
        return "invalid", [(d.field, d.item, d.message) for d in error.details]


def same_batch(a: PredictionBatch, b: PredictionBatch) -> bool:
    return (
        a.ids == b.ids
        and a.ts == b.ts
        and a.cohorts == b.cohorts
        and a.inputs.shape == b.inputs.shape
        and bool(np.array_equal(a.inputs, b.inputs))
    )


def check(items: list[Any], task: str) -> None:
    declared = outcome(lambda: parse_predictions_declared(items, task=task, n_classes=K, now=NOW))
    fast = _parse_predictions_fast(items, task, K, NOW)
    if fast is not None:
        assert declared[0] == "ok", (items, declared)
        assert same_batch(fast, declared[1]), items
    served = outcome(lambda: parse_predictions(items, task=task, n_classes=K, now=NOW))
    assert served[0] == declared[0]
    if served[0] == "ok":
        assert same_batch(served[1], declared[1])
    else:
        assert served[1] == declared[1]


SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.slow
@SETTINGS
@given(batches("logits", st.lists(NUMBER, min_size=K, max_size=K)))
def test_multiclass_batches_get_the_declared_verdict_and_errors(items: list[Any]) -> None:
    check(items, "multiclass")


@pytest.mark.slow
@SETTINGS
@given(batches("score", st.floats(0, 1)))
def test_binary_batches_get_the_declared_verdict_and_errors(items: list[Any]) -> None:
    check(items, "binary")


EDGE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    10**400,
    -(10**400),
    1e308,
    -0.0,
    0.5,
    1.0000001,
    MAX_ABS_LOGIT,
    MAX_ABS_LOGIT * 1.01,
    "",
    " ",
    "\t\n",
    "a\x00b",
    "a\ud800",
    "\udfff",
    "x" * (MAX_ID_LENGTH + 1),
    "x" * MAX_ID_LENGTH,
    "2026-11-30T11:00:00Z",
    "2026-11-30T11:00:00",
    "1999-12-31T23:59:59Z",
    "2026-12-31T00:00:00Z",
    "emea",
    [],
    [1.0, 2.0],
    [1.0, 2.0, 3.0],
    [1.0, 2.0, 3.0, 4.0],
    [1, True, 0],
    [1.0, "2", 3.0],
    [10**400, 0, 0],
    {},
    {"region": "emea"},
    {"region": ""},
    {"region": "a\x00"},
    {"9bad": "x"},
    {"region": 1},
    {"region": {"n": 1}},
]


@pytest.mark.parametrize("task", ["multiclass", "binary"])
@pytest.mark.parametrize("field", ["id", "ts", "cohort", "logits", "score", "extra"])
def test_every_edge_value_in_every_field_gets_the_declared_verdict(task: str, field: str) -> None:
    value_key = "logits" if task == "multiclass" else "score"
    clean = {
        "id": "a",
        "ts": "2026-11-30T11:00:00Z",
        value_key: [1.0, 2.0, 3.0] if task == "multiclass" else 0.5,
    }
    for value in EDGE_VALUES:
        spoiled = {**clean, "id": "b", field: value}
        check([clean, spoiled], task)


def test_an_id_of_only_whitespace_is_refused_on_both_paths() -> None:
    items = [{"id": " \t", "ts": "2026-11-30T11:00:00Z", "score": 0.5}]
    assert _parse_predictions_fast(items, "binary", 2, NOW) is None
    verdict, errors = outcome(lambda: parse_predictions(items, task="binary", n_classes=2, now=NOW))
    assert verdict == "invalid" and [e[:2] for e in errors] == [("predictions[0].id", 0)]


def totals(parse: Any) -> tuple[Any, ...]:
    """The reply of a refused batch whole: its details, how many problems, how many items."""
    with pytest.raises(ValidationFailed) as refused:
        parse()
    error = refused.value
    return [(d.field, d.item, d.message) for d in error.details], error.details_total, error.items


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(task=st.sampled_from(["multiclass", "binary"]), data=st.data())
def test_a_batch_of_many_bad_items_gets_the_declared_details_and_totals(
    task: str, data: st.DataObject
) -> None:
    """A drawn batch sent 60 times over: more problems than a reply lists whenever it has two
    or more."""
    value_key = "logits" if task == "multiclass" else "score"
    values = st.lists(NUMBER, min_size=K, max_size=K) if task == "multiclass" else st.floats(0, 1)
    items = data.draw(batches(value_key, values)) * 60
    declared = outcome(lambda: parse_predictions_declared(items, task=task, n_classes=K, now=NOW))
    if declared[0] == "ok":
        return
    assert totals(lambda: parse_predictions(items, task=task, n_classes=K, now=NOW)) == totals(
        lambda: parse_predictions_declared(items, task=task, n_classes=K, now=NOW)
    )


def test_the_declaration_names_only_the_rows_the_column_checks_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of 4,000 items with 1,000 bad ones, the declaration validates as many as the reply's
    details take; the totals come from the column checks and are the declaration's."""
    items: list[Any] = [
        {"id": f"p{i}", "ts": "2026-11-30T11:00:00Z", "logits": [0.0, 1.0, 2.0]}
        for i in range(4_000)
    ]
    for i in range(0, 4_000, 4):
        items[i] = {**items[i], "ts": "yesterday", "cohort": {"9bad": "x"}}
    expected = totals(
        lambda: parse_predictions_declared(items, task="multiclass", n_classes=K, now=NOW)
    )
    validated: list[Any] = []
    declared = column_checks.collect

    def counted(model: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        validated.append(value)
        return declared(model, value, *args, **kwargs)

    monkeypatch.setattr(column_checks, "collect", counted)
    served = totals(lambda: parse_predictions(items, task="multiclass", n_classes=K, now=NOW))
    assert served == expected
    assert expected[1:] == (2_000, 1_000)
    assert len(validated) == MAX_DETAILS // 2
