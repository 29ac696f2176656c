"""The families' declared parameters agree with their ``from_dict``: whatever a family reads,
its model accepts; whatever the model refuses, the family refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.calibration import CalibrationInputError, calibrator_from_dict
from service.calibration.binary_families import MAX_BETA_INTERCEPT, MAX_BETA_SHAPE
from service.calibration.multiclass_families import MAX_BIAS, MAX_SCALE
from service.contracts.families import FAMILIES, FAMILY_SCHEMAS


def _number(lo: float, hi: float) -> st.SearchStrategy[Any]:
    """Numbers in [lo, hi] mostly, some beyond it, and a few values that are not numbers."""
    span = hi - lo
    inside = st.floats(lo, hi)
    return st.one_of(
        inside,
        inside,
        inside,
        inside,
        st.floats(lo - span / 4, hi + span / 4),
        st.sampled_from([lo, hi, 0, 1, -1]),
        st.sampled_from([None, "0.5", True, float("nan"), float("inf"), 10**400]),
    )


def _numbers(lo: float, hi: float, max_size: int = 4) -> st.SearchStrategy[list[Any]]:
    return st.lists(_number(lo, hi), max_size=max_size)


def _sorted(values: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[list[Any]]:
    """Mostly increasing lists, so that the bounds and sizes decide more often than the order."""
    return values.map(
        lambda v: sorted(v) if all(isinstance(x, float | int) and x == x for x in v) else v
    )


_MAP = st.fixed_dictionaries({"x": _sorted(_numbers(0, 1)), "y": _sorted(_numbers(0, 1))})
_VECTOR = st.sampled_from([1, 2, 2, 3]).flatmap(
    lambda k: st.fixed_dictionaries(
        {
            "method": st.just("vector"),
            "scale": _numbers(-MAX_SCALE, MAX_SCALE, k),
            "bias": _numbers(-MAX_BIAS, MAX_BIAS, k),
        }
    )
)
_MATRIX = st.sampled_from([1, 2, 2, 3]).flatmap(
    lambda k: st.fixed_dictionaries(
        {
            "method": st.just("matrix"),
            "weights": st.lists(_numbers(-MAX_SCALE, MAX_SCALE, k), min_size=k, max_size=k),
            "bias": _numbers(-MAX_BIAS, MAX_BIAS, k),
        }
    )
)
PARAMETERS = st.one_of(
    _MAP.map(lambda m: {"method": "isotonic", **m}),
    st.fixed_dictionaries({"method": st.just("isotonic"), "per_class": st.lists(_MAP, max_size=3)}),
    st.fixed_dictionaries(
        {
            "method": st.just("histogram"),
            "cuts": _sorted(_numbers(0, 1)),
            "values": _numbers(0, 1, 5),
        }
    ),
    st.fixed_dictionaries(
        {
            "method": st.just("beta"),
            "a": _number(0, MAX_BETA_SHAPE),
            "b": _number(0, MAX_BETA_SHAPE),
            "c": _number(-MAX_BETA_INTERCEPT, MAX_BETA_INTERCEPT),
        }
    ),
    _VECTOR,
    _MATRIX,
)


def _declared(value: dict[str, Any]) -> bool:
    for model in FAMILIES:
        try:
            model.model_validate(value)
        except ValidationError:
            continue
        return True
    return False


def _read(value: dict[str, Any]) -> bool:
    try:
        calibrator_from_dict(value)
    except CalibrationInputError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(PARAMETERS)
def test_what_a_family_reads_its_model_accepts(value: dict[str, Any]) -> None:
    read = _read(value)
    if read:
        assert _declared(value), value
    if not _declared(value):
        assert not read, value


@pytest.mark.parametrize(
    "value",
    [
        {"method": "isotonic", "x": [0.1, 0.5], "y": [0.0, 1.0]},
        {"method": "isotonic", "per_class": [{"x": [0.5], "y": [0.2]}] * 3},
        {"method": "histogram", "cuts": [], "values": [0.3]},
        {"method": "histogram", "cuts": [0.5], "values": [0.1, 0.9]},
        {"method": "beta", "a": 1, "b": 2.5, "c": -3},
        {"method": "vector", "scale": [1, 2], "bias": [0, 0]},
        {"method": "matrix", "weights": [[1, 0], [0, 1]], "bias": [0, 0]},
    ],
)
def test_a_family_and_its_model_both_accept_its_parameters(value: dict[str, Any]) -> None:
    assert _read(value) and _declared(value)


def test_each_schema_refuses_unknown_keys_and_states_no_prefix_items() -> None:
    for schema in FAMILY_SCHEMAS:
        assert schema["additionalProperties"] is False
        assert "prefixItems" not in str(schema) and "$ref" not in str(schema)
