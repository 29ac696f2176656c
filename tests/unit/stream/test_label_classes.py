"""A label means a class of its prediction's contract, whatever the current version says."""

from __future__ import annotations

from service.stream.label_classes import SentLabel, class_index, known_labels, same_label


def test_a_name_is_read_by_the_classes_of_the_contract_that_judges_it() -> None:
    assert class_index(SentLabel(0, "a"), ("a", "b", "c")) == 0
    assert class_index(SentLabel(0, "a"), ("c", "b", "a")) == 2
    assert class_index(SentLabel(3, "d"), ("a", "b", "c")) is None


def test_an_index_is_read_within_the_contract_s_k() -> None:
    assert class_index(SentLabel(2), ("a", "b", "c")) == 2
    assert class_index(SentLabel(3), ("a", "b", "c")) is None
    assert class_index(SentLabel(3), ("a", "b", "c", "d")) == 3


def test_known_labels_span_every_version_with_the_newest_index() -> None:
    index_of, n_classes = known_labels([("c", "b", "a", "d"), ("a", "b", "c"), ("x", "y")])
    assert index_of == {"c": 0, "b": 1, "a": 2, "d": 3, "x": 0, "y": 1}
    assert n_classes == 4
    assert known_labels([]) == ({}, 0)


def test_labels_met_again_compare_by_the_prediction_s_contract_when_known() -> None:
    a_by_name, zero = SentLabel(2, "a"), SentLabel(0)
    assert same_label(a_by_name, zero, ("a", "b")) is True
    assert same_label(a_by_name, zero, ("b", "a")) is False
    assert same_label(SentLabel(0, "d"), SentLabel(1, "d"), ("a", "b")) is True
    # Without the prediction: names as names, anything else by (provisional) index.
    assert same_label(SentLabel(0, "a"), SentLabel(0, "b"), None) is False
    assert same_label(a_by_name, SentLabel(2), None) is True
    assert same_label(SentLabel(1), SentLabel(1), None) is True
