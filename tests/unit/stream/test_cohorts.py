"""Cohorts: slices of a cohort, the caps on keys and values, the cohort query parameter."""

from __future__ import annotations

import pytest

from service.common.errors import ErrorCollector
from service.stream.cohorts import (
    ALL,
    OTHER,
    cap_values,
    parse_cohort,
    parse_slice_query,
    slices_of,
)


def test_a_cohort_counts_in_all_and_one_slice_per_key_sorted() -> None:
    assert slices_of({"region": "eu", "lang": "tr"}) == [ALL, "lang=tr", "region=eu"]
    assert slices_of({}) == [ALL]


def test_values_beyond_a_keys_cap_fold_into_other() -> None:
    cohorts = [{"region": "eu"}, {"region": "us"}, {"region": "apac"}, {"region": "eu"}]
    capped, new = cap_values(cohorts, {}, max_values=2)
    assert capped == [{"region": "eu"}, {"region": "us"}, {"region": OTHER}, {"region": "eu"}]
    assert new == {"region": ["eu", "us"]}


def test_values_already_admitted_count_against_the_cap() -> None:
    capped, new = cap_values([{"region": "us"}, {"region": "eu"}], {"region": {"eu"}}, 1)
    assert capped == [{"region": OTHER}, {"region": "eu"}]
    assert new == {}


def test_keys_beyond_the_models_key_cap_fold_into_one_slice() -> None:
    known = {"region": {"eu"}}
    capped, new = cap_values([{"region": "eu", "lang": "tr"}], known, 10, max_keys=1)
    assert capped == [{OTHER: OTHER, "region": "eu"}]
    assert new == {}
    assert slices_of(capped[0]) == [ALL, f"{OTHER}={OTHER}", "region=eu"]


@pytest.mark.parametrize(
    ("cohort", "field"),
    [
        ({f"k{i}": "v" for i in range(9)}, "cohort"),
        ({"1k": "v"}, "cohort.1k"),
        ({"k": ""}, "cohort.k"),
        ({"k": "v" * 65}, "cohort.k"),
        ({"k": OTHER}, "cohort.k"),
        ({OTHER: "v"}, f"cohort.{OTHER}"),
        ("region=eu", "cohort"),
    ],
)
def test_cohorts_break_no_rule_unnamed(cohort: object, field: str) -> None:
    errors = ErrorCollector()
    assert parse_cohort(cohort, "cohort", errors, 3) is None
    assert [(d.field, d.item) for d in errors.details] == [(field, 3)]


@pytest.mark.parametrize(
    ("raw", "slice_"),
    [
        (None, ALL),
        ("all", ALL),
        ("region:emea", "region=emea"),
        ("region=emea", "region=emea"),
        ("url=https://x.example/a=b", "url=https://x.example/a=b"),
        ("zone=eu:west", "zone=eu:west"),
        ("zone:eu=west", "zone=eu=west"),
    ],
)
def test_the_cohort_query_names_a_slice(raw: str | None, slice_: str) -> None:
    assert parse_slice_query(raw) == slice_


@pytest.mark.parametrize(
    "raw", ["region", "region:", "region=", ":emea", "=emea", "1region:emea", "1region=emea"]
)
def test_a_malformed_cohort_query_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_slice_query(raw)
