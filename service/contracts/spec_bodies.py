"""The parts of a contract request body (``service.contracts.requests``): the data window, the
split, the bin edges, the drift policy and the calibrators a client may register, each with its
bounds (listed in ``service.contracts.requests``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

import numpy as np
from annotated_types import Len
from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    StringConstraints,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from service.calibration import CalibrationInputError, default_edges, validate_edges
from service.calibration.calibrators import (
    MAX_PLATT_INTERCEPT,
    MAX_PLATT_SLOPE,
    MAX_TEMPERATURE,
    MIN_PLATT_SLOPE,
    MIN_TEMPERATURE,
)
from service.common.declared import (
    FINITE,
    JSON_INTEGER,
    NO_INF_NAN,
    BodyModel,
    Declared,
    Fraction,
    LongText,
    Timestamp,
    collect,
    context_of,
    describe_pattern,
    inline_schema,
    integer_in,
    number_in,
    problems,
    text_first,
    validated_then,
)
from service.common.errors import ErrorCollector
from service.common.values import finite_float, format_timestamp
from service.contracts.baseline_checks import MAX_COST
from service.contracts.families import FAMILY_SCHEMAS
from service.contracts.model import MAX_BIN_EDGES, DataWindow, Split

DEFAULT_POLICY: dict[str, Any] = {"max_ece": 0.05, "max_ece_increase": 0.02, "min_labeled": 200}
MIN_COST = 1e-6
_SHA256_HEX = 64

#: A SHA-256 as 64 hexadecimal characters, stored lower-case.
Fingerprint = Annotated[
    str,
    StringConstraints(
        pattern=describe_pattern(
            "^[0-9a-fA-F]{64}$", "expected a SHA-256 as 64 hexadecimal characters"
        )
    ),
    AfterValidator(str.lower),
    text_first(_SHA256_HEX),
]
Cost = Annotated[float, NO_INF_NAN, number_in(MIN_COST, MAX_COST), FINITE]
Edge = Annotated[float, NO_INF_NAN, number_in(0, 1), FINITE]


def problem_at(field: str, message: str, *, at_field: bool = True) -> PydanticCustomError:
    """One problem at ``field``, a path relative to the model (``problems``)."""
    errors = ErrorCollector()
    errors.add(field, message)
    return problems(errors, at_field=at_field)


class DataWindowBody(BodyModel):
    """The period the contract's data comes from; ``end`` not before ``start``."""

    start: Timestamp
    end: Timestamp

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end < self.start:
            raise problem_at("end", "must not be before data_window.start", at_field=False)
        return self

    def window(self) -> DataWindow:
        """The stored form: both ends in calmon's one timestamp form."""
        return DataWindow(format_timestamp(self.start), format_timestamp(self.end))


class SplitBody(BodyModel):
    """How the fit and eval sets were split, with the fingerprints of their rows, if known."""

    method: LongText
    fit_fingerprint: Fingerprint | None = None
    eval_fingerprint: Fingerprint | None = None

    def split(self) -> Split:
        """The stored form."""
        return Split(self.method, self.fit_fingerprint, self.eval_fingerprint)


@dataclass(frozen=True)
class EqualMass:
    """``{"equal_mass": M}`` in a fit request: M bins of equal mass, their edges fixed at fit
    time from the fit set's calibrated confidences (``contracts.fitting.equal_mass_edges``)."""

    bins: int


class EqualMassBody(BodyModel):
    """``{"equal_mass": M}``: M bins of equal mass, M in [1, MAX_BIN_EDGES - 1]."""

    equal_mass: Annotated[int, integer_in(1, MAX_BIN_EDGES - 1), JSON_INTEGER]


def bin_edges_of(value: Any, info: ValidationInfo) -> tuple[float, ...] | EqualMass:
    """Strictly increasing from 0 to 1, at most ``MAX_BIN_EDGES``; default 15 equal bins; or,
    in a fit request, ``{"equal_mass": M}`` with M in [1, MAX_BIN_EDGES - 1]."""
    path = info.field_name or "bin_edges"
    errors = ErrorCollector()
    if value is None:
        return tuple(float(e) for e in default_edges())
    if isinstance(value, dict):
        parsed = collect(EqualMassBody, value, errors, context_of(info), path=path)
        if parsed is None:
            raise problems(errors)
        return EqualMass(parsed.equal_mass)
    if not isinstance(value, list):
        raise problem_at(path, "expected a list of numbers")
    if len(value) > MAX_BIN_EDGES:
        raise problem_at(path, f"at most {MAX_BIN_EDGES} edges, got {len(value)}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or finite_float(v) is None:
            raise problem_at(f"{path}[{i}]", "expected a finite number")
    try:
        return tuple(float(e) for e in validate_edges(np.asarray(value, dtype=np.float64)))
    except CalibrationInputError as exc:
        raise problem_at(path, str(exc)) from None


#: What ``bin_edges`` accepts: a list of edges (the first 0, the last 1, strictly increasing:
#: validation states it) or ``{"equal_mass": M}``, or null for the default.
EdgesInput = Annotated[list[Edge], Len(2, MAX_BIN_EDGES)] | EqualMassBody | None
#: A ``bin_edges`` field: the edges as stored, or ``EqualMass`` in a fit request.
BinEdges = Annotated[Any, PlainValidator(bin_edges_of, json_schema_input_type=EdgesInput)]


class DriftPolicyBody(BodyModel):
    """A drift policy; absent thresholds take ``DEFAULT_POLICY``'s values; ``c_fp`` and
    ``c_fn`` come together or not at all."""

    max_ece: Fraction = DEFAULT_POLICY["max_ece"]
    max_ece_increase: Fraction = DEFAULT_POLICY["max_ece_increase"]
    min_labeled: Annotated[int, integer_in(0), JSON_INTEGER] = DEFAULT_POLICY["min_labeled"]
    # Absent (None) or a number: null is refused, as any value that is not a number.
    c_fp: Annotated[Cost, Field(default=None)]
    c_fn: Annotated[Cost, Field(default=None)]

    @model_validator(mode="wrap")
    @classmethod
    def _both_costs(cls, value: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        lonely = isinstance(value, dict) and ("c_fp" in value) != ("c_fn" in value)
        extra = [(("c_fp",), "set both c_fp and c_fn, or neither")] if lonely else []
        return validated_then(cls, value, handler, extra)

    def stored(self) -> dict[str, Any]:
        """The policy's stored form: every threshold, the costs if set."""
        return {**DEFAULT_POLICY, **self.model_dump(exclude_unset=True)}


#: A drift policy (the OpenAPI document states it beside the contract replies).
DRIFT_POLICY = Declared("DriftPolicy", DriftPolicyBody)


class TemperatureBody(BodyModel):
    method: Literal["temperature"]
    temperature: Annotated[float, NO_INF_NAN, number_in(MIN_TEMPERATURE, MAX_TEMPERATURE), FINITE]


class PlattBody(BodyModel):
    method: Literal["platt"]
    slope: Annotated[float, NO_INF_NAN, number_in(MIN_PLATT_SLOPE, MAX_PLATT_SLOPE), FINITE]
    intercept: Annotated[
        float, NO_INF_NAN, number_in(-MAX_PLATT_INTERCEPT, MAX_PLATT_INTERCEPT), FINITE
    ]


class IdentityBody(BodyModel):
    method: Literal["identity"]


#: The calibrators a client may register: the parametric ones, identity, and the families.
CALIBRATOR_SCHEMA: dict[str, Any] = {
    "oneOf": [
        *(inline_schema(m.model_json_schema()) for m in (TemperatureBody, PlattBody, IdentityBody)),
        *FAMILY_SCHEMAS,
    ]
}
