"""The labeled set's declaration: what the rules against the contract accept, the model accepts,
so the set is refused by the model only where its schema says so."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.declared import collect
from service.common.errors import ErrorCollector
from service.contracts.labeled_sets import (
    LABELED_SET_SCHEMA,
    LabeledSetBody,
    parse_inputs,
    parse_labeled_set,
    parse_labels,
)

CLASSES = ("a", "b", "c")

_GOOD = st.one_of(st.floats(0, 1), st.floats(-MAX_ABS_LOGIT, MAX_ABS_LOGIT), st.integers(0, 1))
_NUMBER = st.one_of(
    _GOOD,
    _GOOD,
    _GOOD,
    st.floats(-MAX_ABS_LOGIT * 1.5, MAX_ABS_LOGIT * 1.5),
    st.sampled_from([True, None, "1", float("nan"), float("inf"), 10**400]),
)
_LABEL = st.one_of(
    st.integers(0, 1),
    st.sampled_from(["a", "b"]),
    st.integers(-1, 3),
    st.sampled_from(["c", "z", "", True, None, 0.5]),
)


def _sets(n: int) -> st.SearchStrategy[dict[str, Any]]:
    """Sets of about ``n`` rows, of either task's input or both."""
    rows = st.lists(
        st.lists(_NUMBER, min_size=3, max_size=3) | st.lists(_NUMBER, max_size=4),
        min_size=n,
        max_size=n + 1,
    )
    labels = st.lists(_LABEL, min_size=n, max_size=n)
    scores = st.lists(_NUMBER, min_size=n, max_size=n + 1)
    return st.one_of(
        st.fixed_dictionaries({"logits": rows, "labels": labels}),
        st.fixed_dictionaries({"scores": scores, "labels": labels}),
        st.fixed_dictionaries({"labels": labels}, optional={"logits": rows, "scores": scores}),
    )


_SETS = st.integers(0, 4).flatmap(_sets)


def _rules_accept(value: dict[str, Any], task: str, classes: tuple[str, ...]) -> bool:
    """The rules against the contract alone (``parse_labeled_set`` without its model)."""
    key = "logits" if task == "multiclass" else "scores"
    if set(value) != {key, "labels"}:
        return False
    errors = ErrorCollector()
    inputs = parse_inputs(value[key], key, task=task, n_classes=len(classes), errors=errors)
    labels = parse_labels(value["labels"], "labels", classes=classes, errors=errors)
    return inputs is not None and labels is not None and len(inputs) == len(labels)


@settings(max_examples=300, deadline=None)
@given(_SETS, st.sampled_from(["multiclass", "binary"]))
def test_what_the_rules_accept_the_declaration_accepts(value: dict[str, Any], task: str) -> None:
    classes = CLASSES if task == "multiclass" else CLASSES[:2]
    if _rules_accept(value, task, classes):
        assert collect(LabeledSetBody, value, ErrorCollector(), {}) is not None, value
        errors = ErrorCollector()
        assert parse_labeled_set(value, "fit", task=task, classes=classes, errors=errors)
        assert not errors


def test_the_schema_takes_one_input_and_refuses_unknown_keys() -> None:
    assert LABELED_SET_SCHEMA["oneOf"] == [{"required": ["logits"]}, {"required": ["scores"]}]
    assert LABELED_SET_SCHEMA["required"] == ["labels"]
    assert LABELED_SET_SCHEMA["additionalProperties"] is False
    assert "prefixItems" not in str(LABELED_SET_SCHEMA) and "$ref" not in str(LABELED_SET_SCHEMA)
