"""Request bodies as pydantic models: strict leaves, calmon's messages, paths and order, and
self-contained schemas."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Self

import pytest
from pydantic import ModelWrapValidatorHandler, PlainValidator, ValidationInfo, model_validator

from service.common.declared import (
    BodyModel,
    Declared,
    Fraction,
    LongText,
    Name,
    Timestamp,
    collect,
    integer_in,
    one_of,
    problems,
    validated_then,
)
from service.common.errors import ErrorCollector
from service.contracts.requests import FIT, REGISTRATION, RETIREMENT
from service.contracts.spec_bodies import DRIFT_POLICY
from service.gate.requests import GATE_POLICY, GATE_REQUEST
from service.stream.batch_bodies import LABELS, PREDICTIONS

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _two_problems(value: Any, info: ValidationInfo) -> Any:
    errors = ErrorCollector()
    errors.add(f"{info.field_name}[0]", "first")
    errors.add("elsewhere", "second")
    raise problems(errors)


class Inner(BodyModel):
    when: Timestamp
    share: Fraction = 0.5


class Sample(BodyModel):
    name: Name
    note: LongText | None = None
    count: Annotated[int, integer_in(0, 10)] = 0
    kind: one_of(("a", "b")) = "a"  # type: ignore[valid-type]
    inner: Inner | None = None
    odd: Annotated[Any, PlainValidator(_two_problems)] = None

    @model_validator(mode="wrap")
    @classmethod
    def _no_zz(cls, value: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        extra = [(("zz",), "never zz")] if isinstance(value, dict) and "zz" in value else []
        return validated_then(cls, value, handler, extra)


def details(value: Any, model: type[BodyModel] = Sample, path: str = "") -> list[tuple[str, str]]:
    errors = ErrorCollector()
    assert collect(model, value, errors, {"now": NOW}, path=path) is None
    return [(d.field, d.message) for d in errors.details]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("count", "1", "expected an integer"),
        ("count", True, "expected an integer"),
        ("count", 1.5, "expected an integer"),
        ("count", 1.0, "expected an integer"),
        ("count", 11, "must be <= 10"),
        ("count", 2**60, "must be <= 10"),
        ("kind", "c", "must be one of a, b"),
        ("kind", 1, "expected a non-empty string"),
        ("note", "", "expected a non-empty string"),
        ("note", " \t", "expected a non-empty string"),
        ("note", "a\x00b", "contains a NUL character"),
        ("note", "a\ud800", "contains a lone surrogate: not valid Unicode"),
        ("note", "x" * 2001, "longer than 2000 characters"),
        ("name", "has space", "may contain only letters, digits and . _ : - (max 200)"),
        ("name", "glyphs\n", "may contain only letters, digits and . _ : - (max 200)"),
        ("name", "a\x00", "contains a NUL character"),
    ],
)
def test_leaves_are_strict_and_speak_calmons_words(field: str, value: Any, message: str) -> None:
    assert details({"name": "m", field: value}) == [(field, message)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.5", "expected a number"),
        (True, "expected a number"),
        (10**400, "must be finite"),
        (1.5, "must be <= 1"),
        (-0.1, "must be >= 0"),
    ],
)
def test_numbers_are_finite_json_numbers_within_bounds(value: Any, message: str) -> None:
    body = {"name": "m", "inner": {"when": "2026-11-30T11:00:00Z", "share": value}}
    assert details(body) == [("inner.share", message)]


def test_timestamps_are_read_against_the_time_of_receipt() -> None:
    early, late = "1999-12-31T23:59:59Z", "2026-12-02T12:00:01Z"
    assert details({"name": "m", "inner": {"when": early}}) == [
        ("inner.when", "must not be before 2000-01-01T00:00:00.000000Z")
    ]
    assert details({"name": "m", "inner": {"when": late}}) == [
        ("inner.when", "must not be more than 1 day after the time the request was received")
    ]
    parsed = collect(
        Sample,
        {"name": "m", "inner": {"when": "2026-11-30T13:00:00+02:00"}},
        ErrorCollector(),
        {"now": NOW},
    )
    assert parsed is not None and parsed.inner is not None
    assert parsed.inner.when == datetime(2026, 11, 30, 11, tzinfo=UTC)


def test_every_problem_is_listed_unknown_keys_then_missing_then_fields_at_each_level() -> None:
    body = {
        "count": "x",
        "inner": {"share": 2, "extra": 1},
        "odd": 1,
        "surprise": 1,
        "zz": 0,
    }
    assert details(body, path="body") == [
        ("body.surprise", "unknown field"),
        ("body.zz", "unknown field"),
        ("body.name", "required field is missing"),
        ("body.count", "expected an integer"),
        ("body.inner.extra", "unknown field"),
        ("body.inner.when", "required field is missing"),
        ("body.inner.share", "must be <= 1"),
        ("body.odd[0]", "first"),
        ("body.elsewhere", "second"),
        ("body.zz", "never zz"),
    ]


def test_a_body_that_is_not_an_object_is_named_as_the_body() -> None:
    assert details([]) == [("(body)", "expected an object")]
    assert details("x", path="items[2]") == [("items[2]", "expected an object")]


def test_a_rule_that_must_speak_does_so_when_the_rest_is_valid_too() -> None:
    assert details({"name": "m", "zz": 1}) == [("zz", "unknown field"), ("zz", "never zz")]


DECLARED = (REGISTRATION, FIT, RETIREMENT, PREDICTIONS, LABELS, GATE_REQUEST)


def _objects(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [o for v in node for o in _objects(v)]
    if not isinstance(node, dict):
        return []
    return [node, *(o for v in node.values() for o in _objects(v))]


@pytest.mark.parametrize("declared", [*DECLARED, DRIFT_POLICY, GATE_POLICY], ids=lambda d: d.name)
def test_schemas_are_self_contained_and_schema_driven_tests_friendly(
    declared: Declared[Any],
) -> None:
    schema = declared.schema()
    text = json.dumps(schema)
    for word in ("$ref", "$defs", "prefixItems", '"title"'):
        assert word not in text, word
    assert schema["additionalProperties"] is False
    for node in _objects(schema):
        if "properties" in node and node.get("type") == "object":
            assert node.get("additionalProperties") is not True


def test_the_declared_bodies_keep_their_component_names_and_models() -> None:
    assert [d.name for d in DECLARED] == [
        "ContractRegistration",
        "ContractFit",
        "Retirement",
        "PredictionBatch",
        "LabelBatch",
        "GateRequest",
    ]
    assert all(issubclass(d.model, BodyModel) for d in DECLARED)
    assert set(REGISTRATION.schema()["properties"]) >= {"calibrator", "baseline", "data_window"}


def test_a_schema_is_a_fresh_copy() -> None:
    schema = DRIFT_POLICY.schema()
    schema["properties"].clear()
    assert DRIFT_POLICY.schema()["properties"]
