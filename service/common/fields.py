"""Request bodies declared once: each declaration validates a decoded JSON value, recording every
problem with its path, and states its JSON Schema, which the OpenAPI document serves.

A declaration is a tree of fields. The leaves wrap the value checks of ``service.common.values``
(their messages and bounds); ``Obj`` is an object with known keys, some required; ``Custom``
holds a parser that needs the values parsed before it (a contract's classes depend on its task)
together with the schema of what it accepts. ``Obj.parse`` parses its fields in declaration
order and hands each the values parsed so far (``Context.values``).

Absent and ``null`` are the same for an optional field whose declaration is ``nullable``; an
absent optional field otherwise takes its ``default`` (``MISSING``: left out of the result).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.common.errors import ErrorCollector
from service.common.values import (
    MAX_JSON_INTEGER,
    expect_int,
    expect_number,
    expect_object,
    expect_str,
    expect_timestamp,
)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass
class Context:
    """What a field's parser may know besides its value: the time of receipt, the values of the
    enclosing object parsed so far, the batch item index (if any), and what the request is about
    (``about``: a contract's task and classes, say)."""

    now: datetime
    values: dict[str, Any] = field(default_factory=dict)
    item: int | None = None
    about: Mapping[str, Any] = field(default_factory=dict)


def json_pattern(pattern: re.Pattern[str]) -> str:
    """A Python ``fullmatch`` pattern as a JSON Schema (ECMA 262) pattern anchored at both ends."""
    text = pattern.pattern.removesuffix(r"\Z").removesuffix("$").removeprefix("^")
    return f"^{text}$"


#: Text without NUL (PostgreSQL's text cannot hold one): ``\u0000`` reads as NUL in ECMA 262
#: patterns as in Python's.
NO_NUL_PATTERN = r"^[^\u0000]*$"
#: An RFC 3339 timestamp with a zone, from the year 2000 on (the earliest accepted; the latest,
#: a day after receipt, moves with the clock and is left to validation).
TIMESTAMP_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^[2-9][0-9]{3}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$",
}


def _nullable(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if not nullable:
        return schema
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    return {"oneOf": [schema, {"type": "null"}]}


class Field(ABC):
    """A declared field: ``parse`` records problems in ``errors`` and returns the value (None when
    it is unusable), ``schema`` is its JSON Schema."""

    nullable: bool = False
    default: Any = MISSING

    @abstractmethod
    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        """The parsed value of ``value`` found at ``path``."""

    @abstractmethod
    def schema(self) -> dict[str, Any]:
        """The field's JSON Schema."""

    def absent(self, path: str, errors: ErrorCollector, context: Context) -> Any:
        """The value of the field when the key is missing from an optional position."""
        if self.nullable:
            return self.parse(None, path, errors, context)
        return self.default


@dataclass(frozen=True)
class Text(Field):
    """A non-empty string of valid text of at most ``max_length`` characters, matching
    ``pattern`` whole or one of ``choices``."""

    max_length: int = 200
    pattern: re.Pattern[str] | None = None
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    default: Any = MISSING

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        if value is None and self.nullable:
            return None
        return expect_str(
            value,
            path,
            errors,
            max_length=self.max_length,
            pattern=self.pattern,
            choices=self.choices,
            item=context.item,
        )

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.choices is not None:
            out["enum"] = list(self.choices)
        elif self.pattern is not None:
            out["pattern"] = json_pattern(self.pattern)
        else:
            out.update(minLength=1, maxLength=self.max_length, pattern=NO_NUL_PATTERN)
        return _nullable(out, self.nullable)


@dataclass(frozen=True)
class Number(Field):
    """A finite JSON number (not a boolean) within the bounds."""

    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    default: Any = MISSING

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        if value is None and self.nullable:
            return None
        return expect_number(
            value, path, errors, minimum=self.minimum, maximum=self.maximum, item=context.item
        )

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return _nullable(out, self.nullable)


@dataclass(frozen=True)
class Integer(Field):
    """A JSON integer (``3``, not ``3.0`` or ``true``) within the bounds."""

    minimum: int | None = None
    maximum: int | None = None
    default: Any = MISSING

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        return expect_int(
            value, path, errors, minimum=self.minimum, maximum=self.maximum, item=context.item
        )

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        out["maximum"] = MAX_JSON_INTEGER if self.maximum is None else self.maximum
        return out


@dataclass(frozen=True)
class Timestamp(Field):
    """An RFC 3339 timestamp with a zone, within the accepted range around the receipt."""

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        return expect_timestamp(value, path, errors, now=context.now, item=context.item)

    def schema(self) -> dict[str, Any]:
        return dict(TIMESTAMP_SCHEMA)


@dataclass(frozen=True)
class Flag(Field):
    """``true`` or ``false``."""

    default: Any = MISSING

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        if not isinstance(value, bool):
            errors.add(path, "expected true or false", context.item)
            return None
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Obj(Field):
    """An object with the declared keys only, the ``required`` ones present.

    ``parse`` returns ``{key: parsed value}`` for every present key, and for absent optional ones
    their ``absent`` value (left out when it is ``MISSING``); None when the value is not an object.
    """

    fields: Mapping[str, Field]
    required: tuple[str, ...] = ()
    nullable: bool = False

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        if value is None and self.nullable:
            return None
        obj = expect_object(
            value, path, errors, required=self.required, optional=self.fields, item=context.item
        )
        if obj is None:
            return None
        inner = Context(context.now, {}, context.item, context.about)
        prefix = f"{path}." if path else ""
        for name, spec in self.fields.items():
            where = f"{prefix}{name}"
            if name in obj:
                inner.values[name] = spec.parse(obj[name], where, errors, inner)
            elif name not in self.required:
                parsed = spec.absent(where, errors, inner)
                if parsed is not MISSING:
                    inner.values[name] = parsed
        return inner.values

    def parse_or(
        self,
        defaults: Mapping[str, Any],
        value: Any,
        path: str,
        errors: ErrorCollector,
        context: Context,
    ) -> dict[str, Any]:
        """``defaults`` for ``null``; else the parsed object ({} when it is not one)."""
        if value is None:
            return dict(defaults)
        parsed = self.parse(value, path, errors, context)
        return {} if parsed is None else parsed

    def schema(self) -> dict[str, Any]:
        out = {
            "type": "object",
            "properties": {name: spec.schema() for name, spec in self.fields.items()},
            "required": list(self.required),
            "additionalProperties": False,
        }
        return _nullable(out, self.nullable)


Parser = Callable[[Any, str, ErrorCollector, Context], Any]


@dataclass(frozen=True)
class Custom(Field):
    """A field whose parser needs more than its value (the values parsed before it), declared
    with the schema of what it accepts."""

    parser: Parser
    json_schema: Mapping[str, Any]
    nullable: bool = False
    default: Any = MISSING

    def parse(self, value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
        return self.parser(value, path, errors, context)

    def schema(self) -> dict[str, Any]:
        return dict(self.json_schema)


@dataclass(frozen=True)
class Body:
    """A request body: its name in the OpenAPI document and its declaration; ``all_of`` adds
    schemas the body must also satisfy (rules that tie fields together, such as which inputs a
    task takes), for the document only: the declaration's parse enforces them."""

    name: str
    declaration: Obj
    all_of: tuple[dict[str, Any], ...] = ()

    def parse(
        self,
        body: Any,
        errors: ErrorCollector,
        now: datetime,
        about: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The parsed fields (a problem recorded for each unusable one)."""
        values = self.declaration.parse(body, "", errors, Context(now, about=about or {}))
        return {} if values is None else values

    def schema(self) -> dict[str, Any]:
        out = self.declaration.schema()
        if self.all_of:
            out["allOf"] = list(self.all_of)
        return out
