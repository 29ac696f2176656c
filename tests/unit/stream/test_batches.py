"""Prediction and label batches: every bad item named with its index, the fast path, the bounds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.errors import ValidationFailed
from service.stream.batches import parse_envelope, parse_labels, parse_predictions

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


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
        parse_labels(items, classes=["a", "b"], now=NOW)
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
    batch = parse_labels(items, classes=["a", "b"], now=NOW)
    assert (batch.ids, batch.labels, batch.repeats) == (["a", "c"], [1, 1], [("a", 0)])


def test_the_envelope_names_the_model_and_the_items() -> None:
    assert parse_envelope({"model": "m", "labels": [{}]}, "labels", 10).items == [{}]
    with pytest.raises(ValidationFailed) as info:
        parse_envelope({"model": "m\n", "labels": [], "contract_id": "c"}, "labels", 10)
    assert [d.field for d in info.value.details] == ["contract_id", "model", "labels"]
    with pytest.raises(ValidationFailed) as info:
        parse_envelope({"model": "m", "predictions": [{}] * 3}, "predictions", 2)
    assert [d.field for d in info.value.details] == ["predictions"]
