"""JSON Schema fragments written as small declarations, for schemas no model validates.

Request bodies are pydantic models (``service.common.declared``), which validate and state
their schemas. What remains here states schemas only: the baseline's readings
(``service.contracts.baseline_checks``, which ``parse_baseline`` checks by hand against the
contract) and the fragments the OpenAPI document reuses (a name, a timestamp). Each
declaration's ``schema()`` is its JSON Schema; ``nullable`` adds ``null``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from service.common.declared import NO_NUL_PATTERN, TIMESTAMP_SCHEMA, json_pattern
from service.common.values import MAX_JSON_INTEGER

__all__ = ["Custom", "Field", "Integer", "Number", "Obj", "Text", "Timestamp", "json_pattern"]


def _nullable(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if not nullable:
        return schema
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    return {"oneOf": [schema, {"type": "null"}]}


class Field(ABC):
    """A declared field: ``schema`` is its JSON Schema."""

    @abstractmethod
    def schema(self) -> dict[str, Any]:
        """The field's JSON Schema."""


@dataclass(frozen=True)
class Text(Field):
    """A non-empty string of valid text of at most ``max_length`` characters, matching
    ``pattern`` whole or one of ``choices``."""

    max_length: int = 200
    pattern: re.Pattern[str] | None = None
    choices: tuple[str, ...] | None = None
    nullable: bool = False

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

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return _nullable(out, self.nullable)


@dataclass(frozen=True)
class Integer(Field):
    """A JSON integer (``3``, not ``3.0`` or ``true``) within the bounds (at most
    ``MAX_JSON_INTEGER`` when no maximum is given)."""

    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        out["maximum"] = MAX_JSON_INTEGER if self.maximum is None else self.maximum
        return out


@dataclass(frozen=True)
class Timestamp(Field):
    """An RFC 3339 timestamp with a zone (``declared.TIMESTAMP_SCHEMA``)."""

    def schema(self) -> dict[str, Any]:
        return dict(TIMESTAMP_SCHEMA)


@dataclass(frozen=True)
class Obj(Field):
    """An object with the declared keys only, the ``required`` ones present."""

    fields: Mapping[str, Field]
    required: tuple[str, ...] = ()
    nullable: bool = False

    def schema(self) -> dict[str, Any]:
        out = {
            "type": "object",
            "properties": {name: spec.schema() for name, spec in self.fields.items()},
            "required": list(self.required),
            "additionalProperties": False,
        }
        return _nullable(out, self.nullable)


@dataclass(frozen=True)
class Custom(Field):
    """A field whose rules are checked elsewhere, declared with the schema of what it accepts
    (``parser`` is kept for the declarations that name one; nothing calls it)."""

    parser: Callable[..., Any]
    json_schema: Mapping[str, Any]
    nullable: bool = False

    def schema(self) -> dict[str, Any]:
        return dict(self.json_schema)
