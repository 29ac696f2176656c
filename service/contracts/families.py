"""The calibrator families' parameters declared as pydantic models, for the JSON Schema the
OpenAPI document serves: their shape and the bounds of their numbers.

What refuses a bad value with its field named is each family's ``from_dict`` (through
``calibrator_from_dict``), which also checks what a schema cannot state (sizes tied to K and
to each other, increasing thresholds); a value it accepts the models accept.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Len

from service.calibration.binary_families import (
    MAX_BETA_INTERCEPT,
    MAX_BETA_SHAPE,
    MAX_HISTOGRAM_BINS,
    MAX_THRESHOLDS,
)
from service.calibration.multiclass_families import MAX_BIAS, MAX_SCALE
from service.common.declared import (
    FINITE,
    NO_INF_NAN,
    BodyModel,
    Fraction,
    inline_schema,
    number_in,
)

Scale = Annotated[float, NO_INF_NAN, number_in(-MAX_SCALE, MAX_SCALE), FINITE]
Bias = Annotated[float, NO_INF_NAN, number_in(-MAX_BIAS, MAX_BIAS), FINITE]
Shape = Annotated[float, NO_INF_NAN, number_in(0, MAX_BETA_SHAPE), FINITE]
Intercept = Annotated[float, NO_INF_NAN, number_in(-MAX_BETA_INTERCEPT, MAX_BETA_INTERCEPT), FINITE]
#: The thresholds (``x``) or values (``y``) of an isotonic map.
MapPoints = Annotated[list[Fraction], Len(1, MAX_THRESHOLDS)]


class IsotonicMapBody(BodyModel):
    """A monotone map of scores in [0, 1]: ``x`` strictly increasing, ``y`` non-decreasing, as
    many of each."""

    x: MapPoints
    y: MapPoints


class IsotonicBody(BodyModel):
    """The binary isotonic map (``IsotonicMapBody``'s points)."""

    method: Literal["isotonic"]
    x: MapPoints
    y: MapPoints


class IsotonicPerClassBody(BodyModel):
    """One-vs-rest isotonic maps, one per class (K of them)."""

    method: Literal["isotonic"]
    per_class: Annotated[list[IsotonicMapBody], Len(2)]


class HistogramBody(BodyModel):
    """Histogram binning: ``cuts`` strictly increasing inside (0, 1), one more ``values``."""

    method: Literal["histogram"]
    cuts: Annotated[list[Fraction], Len(0, MAX_HISTOGRAM_BINS - 1)]
    values: Annotated[list[Fraction], Len(1, MAX_HISTOGRAM_BINS)]


class BetaBody(BodyModel):
    """Beta calibration's shapes and intercept."""

    method: Literal["beta"]
    a: Shape
    b: Shape
    c: Intercept


class VectorBody(BodyModel):
    """Vector scaling: K scales and K biases."""

    method: Literal["vector"]
    scale: Annotated[list[Scale], Len(2)]
    bias: Annotated[list[Bias], Len(2)]


class MatrixBody(BodyModel):
    """Matrix scaling: K rows of K weights and K biases."""

    method: Literal["matrix"]
    weights: Annotated[list[Annotated[list[Scale], Len(2)]], Len(2)]
    bias: Annotated[list[Bias], Len(2)]


FAMILIES: tuple[type[BodyModel], ...] = (
    IsotonicBody,
    IsotonicPerClassBody,
    HistogramBody,
    BetaBody,
    VectorBody,
    MatrixBody,
)


#: The JSON Schemas of the families' parameters.
FAMILY_SCHEMAS: tuple[dict[str, Any], ...] = tuple(
    inline_schema(m.model_json_schema()) for m in FAMILIES
)
