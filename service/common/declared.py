"""Request bodies declared as pydantic models: each model validates a decoded JSON value and
states its JSON Schema, which the OpenAPI document serves.

Conventions:

* Every model derives from ``BodyModel``: strict types (no ``"1"`` for 1, no ``true`` for 1, no
  1.5 for an integer), unknown keys refused (``additionalProperties: false``).
* The leaves reuse the bounds of ``service.common.values``: ``Text``/``LongText`` (non-empty,
  NUL-free, valid Unicode), ``Name`` (``NAME_PATTERN``), ``Fraction`` and ``number_in`` (finite
  numbers: an integer no float64 holds is refused as not finite), ``integer_in`` (within
  +-``MAX_JSON_INTEGER``), ``Timestamp`` (RFC 3339 with a zone, within the accepted range around
  the time of receipt ``context["now"]``).
* Validation runs with a context: ``{"now": the time of receipt, ...}`` plus what a body's rules
  need (a contract's task and classes for a prediction item, say).
* A rule that needs more than one value (a contract's classes depend on its task) is a field or
  model validator; when it finds problems it records them in an ``ErrorCollector`` with paths
  relative to its model and raises ``problems(errors)``, so one field may report several
  problems at paths of its own choosing.
* ``collect`` turns a ``ValidationError`` into the ``ErrorCollector`` details calmon replies
  with: paths as ``a.b[3].c``, calmon's messages (``message_of``, shared with
  ``service.common.values``), and calmon's order: in each object its unknown keys first, then
  its missing required keys, then its fields in declaration order.
* A rule that must be reported even when other fields of its model are invalid (two keys that
  come together) is a wrap model validator ending in ``validated_then``.
* ``Declared`` pairs a model with its component name in the OpenAPI document; its ``schema()``
  is self-contained (``$defs`` inlined, no ``$ref``) and keeps no titles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from annotated_types import Interval
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    PlainValidator,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from service.common.errors import ErrorCollector
from service.common.values import (
    MAX_JSON_INTEGER,
    NAME_MESSAGE,
    NAME_PATTERN,
    TIMESTAMP_HINT,
    finite_float,
    parse_timestamp,
    text_problem,
    timestamp_problem,
)

M = TypeVar("M", bound=BaseModel)

#: The error type of one message of calmon's own (``problem``).
_PROBLEM = "calmon_problem"
#: The error type of several problems with their own paths (``problems``).
_PROBLEMS = "calmon_problems"


def json_pattern(pattern: re.Pattern[str]) -> str:
    """A Python ``fullmatch`` pattern as a JSON Schema (ECMA 262) pattern anchored at both ends."""
    text = pattern.pattern.removesuffix(r"\Z").removesuffix("$").removeprefix("^")
    return f"^{text}$"


#: Text without NUL (PostgreSQL's text cannot hold one): ``\u0000`` reads as NUL in ECMA 262
#: patterns as in the validator's.
NO_NUL_PATTERN = r"^[^\u0000]*$"
#: ``NAME_PATTERN`` as a JSON Schema pattern.
NAME_JSON_PATTERN = json_pattern(NAME_PATTERN)
#: An RFC 3339 timestamp with a zone, from the year 2000 on (the earliest accepted; the latest,
#: a day after receipt, moves with the clock and is left to validation).
TIMESTAMP_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^[2-9][0-9]{3}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$",
}
#: The message of a string refused by one of the patterns calmon declares, by pattern.
PATTERN_MESSAGES: dict[str, str] = {
    NO_NUL_PATTERN: "contains a NUL character",
    NAME_JSON_PATTERN: NAME_MESSAGE,
}


def _undescribed(schema: dict[str, Any], model: type[Any]) -> None:
    """A model's schema without its docstring: that is for the code's readers."""
    schema.pop("description", None)


def reworded(messages: Mapping[str, str]) -> WrapValidator:
    """A validator giving the value's own error of a type in ``messages`` that message (its
    items' errors keep theirs): ``reworded({"list_type": "expected a list of names"})``."""

    def reword(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            own = [e["type"] for e in exc.errors() if not e["loc"]]
            if own and own[0] in messages:
                raise problem(messages[own[0]]) from None
            raise

    return WrapValidator(reword)


def describe_pattern(pattern: str, message: str) -> str:
    """``pattern``, registered so that a string it refuses is reported as ``message``."""
    PATTERN_MESSAGES[pattern] = message
    return pattern


def text_first(max_length: int) -> WrapValidator:
    """A validator that reports a refused value which is not even text of 1-``max_length``
    characters as text reports it (blank, too long, a NUL or a lone surrogate); the value's own
    rule (one of some choices, a pattern) speaks for the rest. Put it last in an ``Annotated``."""

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, str) or not value.strip():
                raise problem("expected a non-empty string") from None
            if len(value) > max_length:
                raise problem(f"longer than {max_length} characters") from None
            found = text_problem(value)
            if found is not None:
                raise problem(found) from None
            raise

    return WrapValidator(check)


#: The longest text a choice is read as before it is compared with the choices.
MAX_CHOICE_LENGTH = 200


def one_of(choices: Sequence[str]) -> Any:
    """``Literal[*choices]``: one of the strings, stated as an ``enum``."""
    return Annotated[Literal[tuple(choices)], text_first(MAX_CHOICE_LENGTH)]


class BodyModel(BaseModel):
    """A JSON object of a request body: strict types, unknown keys refused."""

    model_config = ConfigDict(
        strict=True, extra="forbid", hide_input_in_errors=True, json_schema_extra=_undescribed
    )


def problem(message: str) -> PydanticCustomError:
    """An error whose message is ``message`` as it stands (no template)."""
    return PydanticCustomError(_PROBLEM, "{message}", {"message": message})


def problems(errors: ErrorCollector, *, at_field: bool = True) -> PydanticCustomError:
    """An error carrying every problem of ``errors``; their paths are relative to the model
    the raising validator belongs to (``at_field``: a field's validator, whose error pydantic
    places at the field; else a model validator's, placed at the model)."""
    details = [(d.field, d.message) for d in errors.details]
    return PydanticCustomError(
        _PROBLEMS,
        "{count} problems",
        {"count": errors.total, "problems": details, "at_field": at_field},
    )


def validated_then(
    model: type[M],
    value: Any,
    handler: ModelWrapValidatorHandler[M],
    extra: Sequence[tuple[tuple[str | int, ...], str]],
) -> M:
    """``handler(value)`` (a wrap model validator's), with the ``extra`` problems, ``(loc,
    message)`` relative to the model, raised after any the handler found: a rule that must be
    reported even when other fields of the model are invalid."""
    try:
        validated = handler(value)
    except ValidationError as exc:
        if not extra:
            raise
        found = [
            InitErrorDetails(
                type=PydanticCustomError(
                    e["type"], "{calmon_msg}", {**(e.get("ctx") or {}), "calmon_msg": e["msg"]}
                ),
                loc=tuple(e["loc"]),
                input=None,
            )
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise ValidationError.from_exception_data(
            model.__name__, [*found, *(_extra(loc, message) for loc, message in extra)]
        ) from None
    if extra:
        raise ValidationError.from_exception_data(
            model.__name__, [_extra(loc, message) for loc, message in extra]
        )
    return validated


def _extra(loc: tuple[str | int, ...], message: str) -> InitErrorDetails:
    return InitErrorDetails(type=problem(message), loc=loc, input=None)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise problem("expected a non-empty string")
    return value


def _finite_integer(value: Any) -> Any:
    """Refuse an integer no float64 holds (``10**400``) as not finite, before the float check
    would call it not a number."""
    if type(value) is int and finite_float(value) is None:
        raise problem("must be finite")
    return value


def text_field(max_length: int = 200, pattern: str = NO_NUL_PATTERN) -> StringConstraints:
    """The constraints of a non-empty text of at most ``max_length`` characters."""
    return StringConstraints(min_length=1, max_length=max_length, pattern=pattern)


def _json_integer(value: Any) -> Any:
    """Refuse an integer beyond +-``MAX_JSON_INTEGER`` whatever the field's own bounds."""
    if type(value) is int and abs(value) > MAX_JSON_INTEGER:
        raise problem(f"must lie within +-{MAX_JSON_INTEGER} (2^53 - 1)")
    return value


NOT_BLANK = AfterValidator(_not_blank)
#: Put last in an ``Annotated`` float (it then runs first): ``_finite_integer``.
FINITE = BeforeValidator(_finite_integer)
#: Put last in an ``Annotated`` int (it then runs first): ``_json_integer``.
JSON_INTEGER = BeforeValidator(_json_integer)

#: Valid text of 1-200 characters, not only whitespace.
Text = Annotated[str, text_field(), NOT_BLANK]
#: Valid text of 1-2000 characters, not only whitespace.
LongText = Annotated[str, text_field(2000), NOT_BLANK]


#: A name (``NAME_PATTERN``): a model, a contract id.
Name = Annotated[str, text_field(200, NAME_JSON_PATTERN), text_first(200)]


def number_in(minimum: float | None = None, maximum: float | None = None) -> Interval:
    """The bounds of a number (``FINITE`` and ``NO_INF_NAN`` keep it finite)."""
    return Interval(ge=minimum, le=maximum)


def integer_in(minimum: int | None = None, maximum: int | None = None) -> Interval:
    """The bounds of an integer, within +-``MAX_JSON_INTEGER`` whatever they are."""
    low = -MAX_JSON_INTEGER if minimum is None else minimum
    return Interval(ge=low, le=MAX_JSON_INTEGER if maximum is None else maximum)


NO_INF_NAN = AllowInfNan(False)
#: A finite number in [0, 1].
Fraction = Annotated[float, NO_INF_NAN, number_in(0, 1), FINITE]


def checked_timestamp(value: Any, info: ValidationInfo) -> datetime:
    """An RFC 3339 timestamp with a zone within the accepted range around ``context["now"]``."""
    parsed = parse_timestamp(value)
    if parsed is None:
        raise problem(TIMESTAMP_HINT)
    found = timestamp_problem(parsed, now_of(info))
    if found is not None:
        raise problem(found)
    return parsed


def now_of(info: ValidationInfo) -> datetime:
    """The time of receipt the validation runs with (``context["now"]``)."""
    context = info.context
    if not isinstance(context, Mapping) or not isinstance(context.get("now"), datetime):
        raise TypeError("validate request bodies with context={'now': <time of receipt>}")
    return context["now"]


def context_of(info: ValidationInfo) -> Mapping[str, Any]:
    """The validation's context (empty when none was given)."""
    return info.context if isinstance(info.context, Mapping) else {}


#: An RFC 3339 timestamp with a zone within the accepted range around the time of receipt, as an
#: aware UTC datetime.
Timestamp = Annotated[datetime, PlainValidator(checked_timestamp), WithJsonSchema(TIMESTAMP_SCHEMA)]


def _path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


def _bound(value: Any) -> str:
    """A bound as messages state it: ``1`` for a whole float within 2^53 (pydantic hands the
    bounds of a float as floats), else as Python writes it."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_JSON_INTEGER:
        return str(int(value))
    return str(value)


def _choices(expected: str) -> str:
    """``'a', 'b' or 'c'`` (pydantic's wording of a literal's values) as ``a, b, c``, sorted."""
    return ", ".join(sorted(re.findall(r"'((?:[^'\\]|\\.)*)'", expected)))


def message_of(kind: str, ctx: Mapping[str, Any], fallback: str) -> str:
    """Calmon's message for a pydantic error of type ``kind`` (its ``ctx``); ``fallback``,
    pydantic's own, for a type calmon's bodies do not meet."""
    match kind:
        case "missing":
            return "required field is missing"
        case "extra_forbidden":
            return "unknown field"
        case "model_type" | "model_attributes_type" | "dict_type":
            return "expected an object"
        case "string_type" | "string_too_short":
            return "expected a non-empty string"
        case "string_too_long":
            return f"longer than {ctx['max_length']} characters"
        case "string_unicode":
            return "contains a lone surrogate: not valid Unicode"
        case "string_pattern_mismatch":
            return PATTERN_MESSAGES.get(ctx.get("pattern", ""), "does not match the pattern")
        case "int_type" | "int_from_float" | "int_parsing":
            return "expected an integer"
        case "float_type" | "float_parsing":
            return "expected a number"
        case "finite_number":
            return "must be finite"
        case "bool_type" | "bool_parsing":
            return "expected true or false"
        case "list_type":
            return "expected a list"
        case "too_short":
            return f"at least {ctx['min_length']} items, got {ctx['actual_length']}"
        case "too_long":
            return f"at most {ctx['max_length']} items, got {ctx['actual_length']}"
        case "literal_error":
            return f"must be one of {_choices(str(ctx.get('expected', '')))}"
        case "greater_than_equal" if ctx["ge"] == -MAX_JSON_INTEGER:
            return f"must lie within +-{MAX_JSON_INTEGER} (2^53 - 1)"
        case "less_than_equal" if ctx["le"] == MAX_JSON_INTEGER:
            return f"must lie within +-{MAX_JSON_INTEGER} (2^53 - 1)"
        case "greater_than_equal":
            return f"must be >= {_bound(ctx['ge'])}"
        case "less_than_equal":
            return f"must be <= {_bound(ctx['le'])}"
        case "greater_than":
            return f"must be > {_bound(ctx['gt'])}"
        case "less_than":
            return f"must be < {_bound(ctx['lt'])}"
        case _:
            return str(ctx["message"]) if kind == _PROBLEM else fallback


def _ordered(errors: list[Any]) -> list[Any]:
    """``errors`` in calmon's order: within each object, unknown keys, then missing keys, then
    the errors of its fields (pydantic's order: declaration order, unknown keys last)."""
    first: dict[tuple[Any, ...], int] = {}
    for n, error in enumerate(errors):
        loc = tuple(error["loc"])
        for depth in range(1, len(loc) + 1):
            first.setdefault(loc[:depth], n)

    def key(error: Any) -> list[tuple[int, int]]:
        loc, kind = tuple(error["loc"]), error["type"]
        parts = []
        for depth in range(1, len(loc) + 1):
            last = depth == len(loc)
            rank = (
                0 if last and kind == "extra_forbidden" else 1 if last and kind == "missing" else 2
            )
            parts.append((rank, first[loc[:depth]]))
        return parts

    return sorted(errors, key=key)


def report(
    exc: ValidationError, errors: ErrorCollector, path: str = "", item: int | None = None
) -> None:
    """Record every error of ``exc`` in ``errors``, at ``path`` (the validated value's own
    path; ``(body)`` stands for the empty path of a request body itself)."""
    for error in _ordered(exc.errors(include_url=False, include_input=False)):
        loc, kind, ctx = tuple(error["loc"]), error["type"], error.get("ctx") or {}
        if kind == _PROBLEMS:
            base = _path(loc[:-1] if ctx["at_field"] else loc, path)
            for where, message in ctx["problems"]:
                errors.add(f"{base}.{where}" if base and where else base or where, message, item)
            continue
        errors.add(_path(loc, path) or "(body)", message_of(kind, ctx, error["msg"]), item)


def collect(
    model: type[M],
    value: Any,
    errors: ErrorCollector,
    context: Mapping[str, Any],
    *,
    path: str = "",
    item: int | None = None,
) -> M | None:
    """``value`` validated by ``model`` with ``context``, or None after recording every problem
    in ``errors`` (at ``path``, with the batch ``item`` index, if any)."""
    try:
        return model.model_validate(value, context=dict(context))
    except ValidationError as exc:
        report(exc, errors, path, item)
        return None


def _inlined(node: Any, defs: Mapping[str, Any]) -> Any:
    """``node`` with every ``$ref`` into ``defs`` replaced by its definition, and without titles
    or null defaults."""
    if isinstance(node, list):
        return [_inlined(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        return {**target, **_inlined({k: v for k, v in node.items() if k != "$ref"}, defs)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$defs" or (key == "title" and isinstance(value, str)):
            continue
        if key == "default" and value is None:
            continue
        out[key] = value if key in {"enum", "const", "default"} else _inlined(value, defs)
    return out


def inline_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A self-contained JSON Schema: ``$defs`` inlined where referred to, titles dropped."""
    result = _inlined(dict(schema), schema.get("$defs", {}))
    assert isinstance(result, dict)
    return result


@dataclass(frozen=True)
class Declared(Generic[M]):
    """A declared body: its component name in the OpenAPI document and its model; ``all_of``
    adds schemas the body must also satisfy (rules that tie fields together, such as which
    inputs a task takes), for the document only: the model's validators enforce them;
    ``adjust`` edits the generated schema (a keyword pydantic does not state)."""

    name: str
    model: type[M]
    all_of: tuple[dict[str, Any], ...] = ()
    adjust: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)

    def schema(self) -> dict[str, Any]:
        """The body's self-contained JSON Schema (built afresh each call)."""
        out = inline_schema(self.model.model_json_schema())
        if self.adjust is not None:
            self.adjust(out)
        if self.all_of:
            out["allOf"] = list(self.all_of)
        return out

    def parse(
        self,
        body: Any,
        errors: ErrorCollector,
        now: datetime,
        path: str = "",
        item: int | None = None,
        **context: Any,
    ) -> M | None:
        """The validated model, or None after recording every problem in ``errors``."""
        return collect(self.model, body, errors, {"now": now, **context}, path=path, item=item)
