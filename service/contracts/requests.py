"""The contract request bodies: registering (``POST /v1/contracts``) and fitting
(``POST /v1/contracts/fit``), validated field by field with every problem listed; their parts
(data window, split, bin edges, drift policy, calibrators) are declared in
``service.contracts.spec_bodies``.

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
from typing import TYPE_CHECKING, Annotated, Any, Self

from annotated_types import Len
from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from service.calibration import (
    CalibrationInputError,
    DriftPolicy,
    calibrator_from_dict,
)
from service.calibration.calibrators import (
    check_bounds,
    task_problem,
)
from service.calibration.vocabulary import Task
from service.common.declared import (
    BodyModel,
    Declared,
    LongText,
    Name,
    Text,
    collect,
    context_of,
    one_of,
    problems,
    reworded,
    validated_then,
)
from service.common.errors import ErrorCollector, LeakageError
from service.contracts.baseline_checks import BaselineBody, parse_baseline
from service.contracts.labeled_sets import LabeledSet, LabeledSetBody, parse_labeled_set
from service.contracts.model import (
    FIT_METHODS,
    MAX_CLASSES,
    TASKS,
    Baseline,
    ContractSpec,
    Split,
    method_problem,
)
from service.contracts.spec_bodies import (
    CALIBRATOR_SCHEMA,
    DEFAULT_POLICY,
    BinEdges,
    DataWindowBody,
    DriftPolicyBody,
    EqualMass,
    SplitBody,
    problem_at,
)

OBJECTIVES = ("nll",)
DEFAULT_BINARY_CLASSES = ("negative", "positive")
METHODS = (*sorted({m for methods in FIT_METHODS.values() for m in methods}), "auto")

if TYPE_CHECKING:
    TaskChoice = Task
    Objective = str
    Method = str
else:
    TaskChoice = one_of(TASKS)
    Objective = one_of(OBJECTIVES)
    Method = one_of(METHODS)


def _calibration_field(errors: ErrorCollector, field: str, exc: CalibrationInputError) -> None:
    name = exc.field or ""
    errors.add(name if name.startswith(field) else f"{field}.{name}".rstrip("."), exc.message)


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
        raise problem_at("bin_edges", "equal_mass edges are fixed by a fit request; list the edges")
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
    bin_edges: BinEdges = Field(default=None, validate_default=True)
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
