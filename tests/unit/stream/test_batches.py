"""Prediction and label batches: every bad item named with its index, the fast path, the bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.errors import InvalidJson, ValidationFailed
from service.common.json_text import JsonText
from service.stream.batch_bodies import parse_envelope
from service.stream.batch_columns import (
    _parse_labels_fast,
    _parse_predictions_fast,
    parse_labels,
    parse_predictions,
)
from service.stream.label_classes import SentLabel

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
#: Labels of a model whose one contract has the classes ``a``, ``b``.
AB: dict[str, Any] = {"index_of": {"a": 0, "b": 1}, "n_classes": 2}


def _prediction(**fields: Any) -> dict[str, Any]:
    return {"id": "p", "ts": "2026-11-30T11:00:00Z", "logits": [1.0, 2.0, 3.0], **fields}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (_prediction(cohort={"k": {"n": 1}}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k": ["a"]}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k": "a\ud800"}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k\n": "v"}), "predictions[1].cohort.k\\n"),
        (_prediction(id="a\ud800"), "predictions[1].id"),
        (_prediction(logits=[MAX_ABS_LOGIT * 1.01, 0, 0]), "predictions[1].logits"),
        (_prediction(logits=[10**400, 0, 0]), "predictions[1].logits"),
        (_prediction(ts="9999-12-31T23:59:59Z"), "predictions[1].ts"),
    ],
)
def test_a_bad_prediction_is_named_with_its_index(item: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_predictions([_prediction(), item], task="multiclass", n_classes=3, now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [(field, 1)]


def test_the_fast_path_takes_clean_batches_at_the_logit_bound() -> None:
    items = [
        _prediction(id=f"p{i}", cohort={"k": "v"}, logits=[MAX_ABS_LOGIT, -MAX_ABS_LOGIT, 0])
        for i in range(3)
    ]
    batch = parse_predictions(items, task="multiclass", n_classes=3, now=NOW)
    assert batch.inputs.shape == (3, 3) and batch.cohorts[0] == {"k": "v"}


def test_labels_refuse_timestamps_out_of_range() -> None:
    items = [
        {"id": "a", "label": 0, "ts": "2026-11-30T11:00:00Z"},
        {"id": "b", "label": "b", "ts": "0001-01-01T00:00:00Z"},
    ]
    with pytest.raises(ValidationFailed) as info:
        parse_labels(items, **AB, now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [("labels[1].ts", 1)]


def test_every_bad_item_and_field_is_listed_at_once() -> None:
    items = [
        _prediction(),
        _prediction(id="", ts="yesterday"),
        "not an object",
        _prediction(logits=[1.0, 2.0], extra=1),
    ]
    with pytest.raises(ValidationFailed) as info:
        parse_predictions(items, task="multiclass", n_classes=3, now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [
        ("predictions[1].id", 1),
        ("predictions[1].ts", 1),
        ("predictions[2]", 2),
        ("predictions[3].extra", 3),
        ("predictions[3].logits", 3),
    ]


def test_the_fast_and_the_item_by_item_paths_agree() -> None:
    clean = [_prediction(id=f"p{i}", cohort={"k": "v"}) for i in range(3)]
    fast = parse_predictions(clean, task="multiclass", n_classes=3, now=NOW)
    # An absent cohort sends the batch down the item-by-item path, with the same result.
    slow = parse_predictions(
        [*clean[:2], _prediction(id="p2")], task="multiclass", n_classes=3, now=NOW
    )
    assert fast.ids == slow.ids and fast.ts == slow.ts
    assert (fast.inputs == slow.inputs).all()
    assert slow.cohorts[2] == {}


def test_binary_scores_lie_in_the_unit_interval() -> None:
    items = [{"id": "a", "ts": "2026-11-30T11:00:00Z", "score": s} for s in (0.0, 1.0, 1.5)]
    with pytest.raises(ValidationFailed) as info:
        parse_predictions(items, task="binary", n_classes=2, now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [("predictions[2].score", 2)]


def test_labels_keep_the_first_of_repeated_ids_and_report_the_rest() -> None:
    items = [
        {"id": "a", "label": "b", "ts": "2026-11-30T11:00:00Z"},
        {"id": "a", "label": 0, "ts": "2026-11-30T11:00:00Z"},
        {"id": "c", "label": 1, "ts": "2026-11-30T11:00:00Z"},
    ]
    batch = parse_labels(items, **AB, now=NOW)
    assert (batch.ids, batch.labels, batch.items, batch.repeats) == (
        ["a", "c"],
        [SentLabel(1, "b"), SentLabel(1)],
        [0, 2],
        [("a", SentLabel(0))],
    )


def test_the_envelope_names_the_model_and_the_items() -> None:
    assert parse_envelope({"model": "m", "labels": [{}]}, "labels", 10).items == [{}]
    with pytest.raises(ValidationFailed) as info:
        parse_envelope({"model": "m\n", "labels": [], "contract_id": "c"}, "labels", 10)
    assert [d.field for d in info.value.details] == ["contract_id", "model", "labels"]
    with pytest.raises(ValidationFailed) as info:
        parse_envelope({"model": "m", "predictions": [{}] * 3}, "predictions", 2)
    assert [d.field for d in info.value.details] == ["predictions"]


def _checked(raw: bytes, items_key: str) -> list[Any]:
    """The items of a body held to the rule on repeated keys, as ``json_body`` holds it."""
    body = orjson.loads(raw)
    JsonText.of(raw, [items_key]).check(body)
    return parse_envelope(body, items_key).items


@pytest.mark.parametrize(
    "cohort", [None, {}, {"region": "emea", "lang": "tr"}, {"k": "v:w\u00e9"}], ids=repr
)
def test_a_clean_prediction_batch_is_proven_free_of_repeated_keys(
    cohort: dict[str, str] | None,
) -> None:
    items = [_prediction(id=f"p{i}", cohort=cohort) for i in range(3)]
    for body in (
        {"model": "m", "predictions": items},
        {"model": "m", "contract_id": "c", "predictions": items},
    ):
        for raw in (json.dumps(body).encode(), orjson.dumps(body)):
            assert JsonText.of(raw).proves_unique_keys(orjson.loads(raw))
            assert _parse_predictions_fast(_checked(raw, "predictions"), "multiclass", 3, NOW)


def test_a_clean_label_batch_is_proven_free_of_repeated_keys() -> None:
    items = [
        {"id": f"p{i}", "label": [0, "b"][i % 2], "ts": "2026-11-30T11:00:00Z"} for i in range(4)
    ]
    raw = orjson.dumps({"model": "m", "labels": items})
    assert JsonText.of(raw).proves_unique_keys(orjson.loads(raw))
    assert _parse_labels_fast(_checked(raw, "labels"), {"a": 0, "b": 1}, 2, NOW)


def _raw(text: str) -> bytes:
    """``text`` with ``TS`` standing for a valid timestamp."""
    return text.replace("TS", '"2026-11-30T11:00:00Z"').encode()


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (
            '{"id": "b", "ts": TS, "logits": [1, 2, 3], "logits": [3, 2, 1]}',
            "predictions[1].logits",
        ),
        ('{"id": "b", "id": "c", "ts": TS, "logits": [1, 2, 3]}', "predictions[1].id"),
        (
            '{"id": "b", "ts": TS, "cohort": {"k": "v", "k": "w"}, "logits": [1, 2, 3]}',
            "predictions[1].cohort.k",
        ),
        ('{"id": "b", "ts": "nope", "logits": [1, 2, 3], "ts": TS}', "predictions[1].ts"),
    ],
)
def test_a_prediction_batch_repeating_a_key_is_refused_naming_it(item: str, field: str) -> None:
    first = '{"id": "a", "ts": TS, "logits": [1, 2, 3]}'
    with pytest.raises(InvalidJson) as info:
        _checked(_raw(f'{{"model": "m", "predictions": [{first}, {item}]}}'), "predictions")
    assert [(d.field, d.item) for d in info.value.details] == [(field, 1)]


def test_a_label_batch_repeating_a_key_is_refused_naming_it() -> None:
    raw = _raw('{"model": "m", "labels": [{"id": "a", "label": 0, "label": 1, "ts": TS}]}')
    with pytest.raises(InvalidJson) as info:
        _checked(raw, "labels")
    assert [(d.field, d.item) for d in info.value.details] == [("labels[0].label", 0)]


def test_an_envelope_repeating_a_key_is_refused_naming_it() -> None:
    raw = _raw('{"model": "m", "model": "n", "labels": [{"id": "a", "label": 0, "ts": TS}]}')
    with pytest.raises(InvalidJson) as info:
        _checked(raw, "labels")
    assert [d.field for d in info.value.details] == ["model"]
    raw = _raw('{"model": "m", "labels": [{"id": "a", "label": 0, "ts": TS}], "labels": 1}')
    with pytest.raises(InvalidJson):
        _checked(raw, "labels")


def test_an_escaped_quote_in_an_id_is_no_repeated_key() -> None:
    for raw in (
        _raw('{"model": "m", "labels": [{"id": "a\\"b", "label": 0, "ts": TS}]}'),
        _raw('{"model": "m", "labels": [{"id": "a\\u0022b", "label": 0, "ts": TS}]}'),
    ):
        assert parse_labels(_checked(raw, "labels"), **AB, now=NOW).ids == ['a"b']
