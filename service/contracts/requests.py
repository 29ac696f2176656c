"""The contract request bodies: registering (``POST /v1/contracts``) and fitting
(``POST /v1/contracts/fit``), validated field by field with every problem listed.

Bounds on what a client may register (each refused with a 422 naming the field):

* ``classes``: at most ``MAX_CLASSES`` = 1,000 names (K). Every bucket of a model's statistics
  holds the K label counts, and three K x M classwise tables (M bins) while K M <= 1,500
  (``service.calibration.packing.CLASSWISE_MAX_CELLS``), so K sets the size of every row
  written per labeled batch and slice: 12 kB at K = 1,000 and 100 bins. Logit rows of K numbers
  within +-``MAX_ABS_LOGIT`` also keep every statistic finite only for K up to this cap.
* ``bin_edges``: at most ``MAX_BIN_EDGES`` = 101 edges (100 bins): finer bins than 0.01 hold too
  few predictions to read, and M multiplies the bucket size as K does.
* the calibrator's parameters: ``service.calibration.calibrators.check_bounds`` and the
  bounds of the families (``binary_families``, ``multiclass_families``); sizes tied to K.
* the policy: ``max_ece`` and ``max_ece_increase`` in [0, 1]; ``min_labeled`` an integer in
  [0, 2^53 - 1]; the costs ``c_fp``, ``c_fn`` in [``MIN_COST``, ``MAX_COST``] = [1e-6, 1e6]: only
  their ratio sets the threshold, and the bounds keep it and the expected cost finite.
* text (names, checkpoint, population, outcome, split method): valid Unicode without NUL; the
  ``data_window`` within ``service.common.values``'s timestamp range around the time of receipt.
* the baseline: ``service.contracts.baseline_checks``; its NLLs at most ``MAX_NLL`` = 1e9
  nats. No row calmon could measure costs more: logits within +-1e6 at T >= 0.05 give at most
  4e7 + ln K, Platt's bounds at most 1.2e8 (``service.calibration.calibrators``).

These constants are the defaults the settings may later take over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import numpy as np
from annotated_types import Len
from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from service.calibration import (
    CalibrationInputError,
    DriftPolicy,
    calibrator_from_dict,
    default_edges,
    validate_edges,
)
from service.calibration.calibrators import (
    MAX_PLATT_INTERCEPT,
    MAX_PLATT_SLOPE,
    MAX_TEMPERATURE,
    MIN_PLATT_SLOPE,
    MIN_TEMPERATURE,
    check_bounds,
    task_problem,
)
from service.calibration.vocabulary import Task
from service.common.declared import (
    FINITE,
    JSON_INTEGER,
    NO_INF_NAN,
    BodyModel,
    Declared,
    Fraction,
    LongText,
    Name,
    Text,
    Timestamp,
    collect,
    context_of,
    describe_pattern,
    inline_schema,
    integer_in,
    number_in,
    one_of,
    problems,
    reworded,
    text_first,
    validated_then,
)
from service.common.errors import ErrorCollector, LeakageError
from service.common.values import finite_float, format_timestamp
from service.contracts.baseline_checks import MAX_COST, BaselineBody, parse_baseline
from service.contracts.families import FAMILY_SCHEMAS
from service.contracts.labeled_sets import LabeledSet, LabeledSetBody, parse_labeled_set
from service.contracts.model import (
    FIT_METHODS,
    MAX_BIN_EDGES,
    MAX_CLASSES,
    TASKS,
    Baseline,
    ContractSpec,
    DataWindow,
    Split,
    method_problem,
)

OBJECTIVES = ("nll",)
DEFAULT_BINARY_CLASSES = ("negative", "positive")
DEFAULT_POLICY: dict[str, Any] = {"max_ece": 0.05, "max_ece_increase": 0.02, "min_labeled": 200}
MIN_COST = 1e-6
_SHA256_HEX = 64
METHODS = (*sorted({m for methods in FIT_METHODS.values() for m in methods}), "auto")

if TYPE_CHECKING:
    TaskChoice = Task
    Objective = str
    Method = str
else:
    TaskChoice = one_of(TASKS)
    Objective = one_of(OBJECTIVES)
    Method = one_of(METHODS)

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


def _problems_at(field: str, message: str, *, at_field: bool = True) -> PydanticCustomError:
    """One problem at ``field``, a path relative to the model (``problems``)."""
    errors = ErrorCollector()
    errors.add(field, message)
    return problems(errors, at_field=at_field)


def _calibration_field(errors: ErrorCollector, field: str, exc: CalibrationInputError) -> None:
    name = exc.field or ""
    errors.add(name if name.startswith(field) else f"{field}.{name}".rstrip("."), exc.message)


class DataWindowBody(BodyModel):
    """The period the contract's data comes from; ``end`` not before ``start``."""

    start: Timestamp
    end: Timestamp

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end < self.start:
            raise _problems_at("end", "must not be before data_window.start", at_field=False)
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


def _edges(value: Any, info: ValidationInfo) -> tuple[float, ...] | EqualMass:
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
        raise _problems_at(path, "expected a list of numbers")
    if len(value) > MAX_BIN_EDGES:
        raise _problems_at(path, f"at most {MAX_BIN_EDGES} edges, got {len(value)}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or finite_float(v) is None:
            raise _problems_at(f"{path}[{i}]", "expected a finite number")
    try:
        return tuple(float(e) for e in validate_edges(np.asarray(value, dtype=np.float64)))
    except CalibrationInputError as exc:
        raise _problems_at(path, str(exc)) from None


#: What ``bin_edges`` accepts: a list of edges (the first 0, the last 1, strictly increasing:
#: validation states it) or ``{"equal_mass": M}``, or null for the default.
EdgesInput = Annotated[list[Edge], Len(2, MAX_BIN_EDGES)] | EqualMassBody | None


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


def _classes(value: list[str] | None, info: ValidationInfo) -> list[str]:
    """K unique class names; a binary contract defaults to ``[negative, positive]``.

    Names refused only by a rule over them (unique, K for the task) still serve the rules after
    them, as does the binary default when a multiclass contract lists none: the context keeps
    them as ``sent_classes`` (``_classes_of``)."""
    task = info.data.get("task")
    names = list(DEFAULT_BINARY_CLASSES) if value is None else value
    if isinstance(info.context, dict):
        info.context["sent_classes"] = names
    errors = ErrorCollector()
    if value is None and task == Task.MULTICLASS:
        errors.add("classes", "required for a multiclass contract (K >= 2 class names)")
    elif value is not None:
        if len(set(value)) != len(value):
            errors.add("classes", "class names must be unique")
        if task == Task.MULTICLASS and len(value) < 2:
            errors.add("classes", f"a multiclass contract needs K >= 2 classes, got {len(value)}")
        if task == Task.BINARY and len(value) != 2:
            errors.add("classes", "a binary contract has exactly two classes [negative, positive]")
    if errors:
        raise problems(errors)
    return names


def _classes_of(info: ValidationInfo) -> list[str] | None:
    """The contract's class names: the valid ones, else those ``_classes`` kept (None when
    the names themselves were not valid text)."""
    classes = info.data.get("classes")
    return classes if classes is not None else context_of(info).get("sent_classes")


def _calibrator(value: Any, info: ValidationInfo) -> Any:
    """A calibrator for the contract's task within the parameter bounds a client may set."""
    task, classes = info.data.get("task"), _classes_of(info)
    errors = ErrorCollector()
    try:
        calibrator = calibrator_from_dict(value, len(classes) if classes else None)
        check_bounds(calibrator)
    except CalibrationInputError as exc:
        _calibration_field(errors, "calibrator", exc)
        raise problems(errors) from None
    problem = task_problem(calibrator, task)
    if problem is not None:
        errors.add(*problem)
        raise problems(errors)
    if task == Task.MULTICLASS and not classes:
        return None
    return calibrator


def _baseline(value: Any, info: ValidationInfo) -> Any:
    """The baseline checked against the contract (``parse_baseline``), as given."""
    values = info.data
    if values.get("task") is None:
        return None
    if isinstance(values.get("bin_edges"), EqualMass):
        raise _problems_at(
            "bin_edges", "equal_mass edges are fixed by a fit request; list the edges"
        )
    errors = ErrorCollector()
    baseline = parse_baseline(
        value,
        errors,
        task=values["task"],
        n_classes=len(_classes_of(info) or ()),
        edges=values.get("bin_edges") or (),
    )
    if errors:
        raise problems(errors)
    return baseline


def _labeled_set(value: Any, info: ValidationInfo) -> Any:
    """A labeled set of the contract's task and classes (``parse_labeled_set``)."""
    task, classes = info.data.get("task"), _classes_of(info)
    if task is None or not classes:
        return None
    errors = ErrorCollector()
    parsed = parse_labeled_set(
        value, info.field_name or "", task=task, classes=tuple(classes), errors=errors
    )
    if errors:
        raise problems(errors)
    return parsed


class SpecBody(BodyModel):
    """The fields a client supplies, common to registering and fitting, in the order they are
    read (a field's rules may read those before it)."""

    model: Name
    checkpoint: Text
    task: TaskChoice
    classes: (
        Annotated[
            list[Text],
            Len(0, MAX_CLASSES),
            reworded({"list_type": "expected a list of class names"}),
        ]
        | None
    ) = Field(default=None, validate_default=True)
    objective: Objective = "nll"
    population: LongText
    outcome: LongText
    data_window: DataWindowBody
    split: SplitBody
    bin_edges: Annotated[Any, PlainValidator(_edges, json_schema_input_type=EdgesInput)] = Field(
        default=None, validate_default=True
    )
    policy: DriftPolicyBody | None = None

    _check_classes = field_validator("classes", mode="after")(_classes)

    def spec_fields(self) -> dict[str, Any]:
        """The spec's fields in their stored forms (``spec_of``)."""
        return {
            "model": self.model,
            "checkpoint": self.checkpoint,
            "task": self.task,
            "classes": tuple(self.classes or ()),
            "objective": self.objective,
            "population": self.population,
            "outcome": self.outcome,
            "data_window": self.data_window.window(),
            "split": self.split.split(),
            "bin_edges": self.bin_edges,
            "policy": dict(DEFAULT_POLICY) if self.policy is None else self.policy.stored(),
        }


class RegistrationBody(SpecBody):
    """``POST /v1/contracts``: the spec, a calibrator and its measured baseline."""

    calibrator: Annotated[Any, PlainValidator(_calibrator)]
    baseline: Annotated[Any, PlainValidator(_baseline, json_schema_input_type=BaselineBody)]


class FitBody(SpecBody):
    """``POST /v1/contracts/fit``: the spec, a method and the labeled fit and eval sets."""

    method: Method
    fit: Annotated[Any, PlainValidator(_labeled_set, json_schema_input_type=LabeledSetBody)]
    eval: Annotated[Any, PlainValidator(_labeled_set, json_schema_input_type=LabeledSetBody)]

    @model_validator(mode="wrap")
    @classmethod
    def _method_fits_task(cls, value: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """A valid method that does not fit a valid task, reported after every other problem."""
        method = value.get("method") if isinstance(value, dict) else None
        task = value.get("task") if isinstance(value, dict) else None
        problem = (
            method_problem(method, task if task in TASKS else None)
            if isinstance(method, str) and method in METHODS
            else None
        )
        return validated_then(cls, value, handler, [(("method",), problem)] if problem else [])


def _spec_schema(schema: dict[str, Any]) -> None:
    """What pydantic does not state: the class names' count and uniqueness, and edges that
    hold 0 and 1, each once (no ``prefixItems``: a tuple type trips schema-driven tests)."""
    classes = schema["properties"]["classes"]["anyOf"][0]
    classes.update(minItems=2, uniqueItems=True)
    edges = schema["properties"]["bin_edges"]["anyOf"][0]
    edges.update(uniqueItems=True, allOf=[{"contains": {"const": 0}}, {"contains": {"const": 1}}])


def _registration_schema(schema: dict[str, Any]) -> None:
    _spec_schema(schema)
    schema["properties"]["calibrator"] = CALIBRATOR_SCHEMA


REGISTRATION = Declared("ContractRegistration", RegistrationBody, adjust=_registration_schema)
FIT = Declared(
    "ContractFit",
    FitBody,
    all_of=(
        {
            "if": {"properties": {"task": {"const": "binary"}}, "required": ["task"]},
            "then": {
                "properties": {"fit": {"required": ["scores"]}, "eval": {"required": ["scores"]}}
            },
            "else": {
                "properties": {"fit": {"required": ["logits"]}, "eval": {"required": ["logits"]}}
            },
        },
    ),
    adjust=_spec_schema,
)


class RetirementBody(BodyModel):
    """``POST /v1/contracts/{id}/retire``: why the contract retires."""

    reason: LongText


RETIREMENT = Declared("Retirement", RetirementBody)
SPEC = tuple(SpecBody.model_fields)


def parse_spec_fields(
    body: Mapping[str, Any], errors: ErrorCollector, now: datetime | None = None
) -> dict[str, Any]:
    """Validate the client-supplied fields shared by register and fit, as in a registration
    (``now``, default the current time, is the time of receipt); record every problem and
    return the spec's fields, None for those not valid."""
    parsed = collect(SpecBody, body, errors, {"now": now or datetime.now(UTC)})
    if parsed is not None:
        return parsed.spec_fields()
    # The task, when it is valid, for a caller that checks more against it.
    task = body.get("task") if isinstance(body, Mapping) else None
    return {name: None for name in SPEC} | {"task": task if task in TASKS else None}


def check_disjoint(split: Split) -> None:
    """Raise ``LeakageError`` when the fit and eval fingerprints are the same rows."""
    if split.fit_fingerprint is not None and split.fit_fingerprint == split.eval_fingerprint:
        raise LeakageError(
            "the fit and eval sets have the same fingerprint: the held-out evidence would be "
            "measured on the rows the calibrator was fitted on",
            [],
        )


def parse_registration(body: Any, now: datetime | None = None) -> ContractSpec:
    """Validate a ``POST /v1/contracts`` body into a spec, or raise listing every problem.

    ``now`` is the time of receipt (default: the current time)."""
    errors = ErrorCollector()
    parsed = REGISTRATION.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("the contract has invalid fields")
    assert parsed is not None
    spec = spec_of(
        parsed.spec_fields(), calibrator=parsed.calibrator, baseline=Baseline(parsed.baseline)
    )
    check_disjoint(spec.split)
    return spec


def spec_of(fields: Mapping[str, Any], **rest: Any) -> ContractSpec:
    """The spec of validated fields (``parse_spec_fields``) and the rest of a contract
    (``calibrator``, ``baseline``, and overrides such as a ``split`` with fingerprints)."""
    values = {**fields, **rest}
    values["policy"] = DriftPolicy.from_dict(values["policy"])
    return ContractSpec(**values)


@dataclass(frozen=True)
class FitRequest:
    """A validated ``POST /v1/contracts/fit`` body."""

    fields: dict[str, Any]
    method: str
    fit: LabeledSet
    eval: LabeledSet


def parse_fit_request(body: Any, now: datetime | None = None) -> FitRequest:
    """Validate the body, listing every problem in one ``ValidationFailed``."""
    errors = ErrorCollector()
    parsed = FIT.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("the fit request has invalid fields")
    assert parsed is not None
    return FitRequest(parsed.spec_fields(), parsed.method, parsed.fit, parsed.eval)


def parse_retirement(body: Any, now: datetime | None = None) -> str:
    """The reason of a ``POST /v1/contracts/{id}/retire`` body."""
    errors = ErrorCollector()
    parsed = RETIREMENT.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("invalid retirement")
    assert parsed is not None
    return parsed.reason
