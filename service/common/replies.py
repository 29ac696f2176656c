"""The building blocks of reply declarations: every JSON reply is a pydantic model deriving
from ``Reply``, and the OpenAPI document's reply schemas are generated from those models.

A reply model forbids keys it does not declare and checks types strictly (no ``"1"`` for 1),
so a route that starts to send an undeclared key, or a value of another type, fails where it
serialises. Fields that a reply may leave out are typed ``X | MISSING`` with the default
``MISSING``: absent from the reply and from the schema's ``required``, never ``null``.

Bounds that are a measure's meaning rather than a guarantee of its arithmetic (a fraction in
[0, 1], which a sum of floats may pass by one ulp) are stated in the schema only
(``documented``); counts and hashes are checked when the reply is built.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from service.common.declared import TIMESTAMP_SCHEMA
from service.common.values import MAX_JSON_INTEGER, format_timestamp


class Reply(BaseModel):
    """A JSON reply, or an object within one: declared keys only, strict types. A reply reads
    the domain object it declares by attribute (``Reply.model_validate(result)``), so a result
    is declared once as a dataclass and once as its reply, with no dictionary in between."""

    model_config = ConfigDict(extra="forbid", strict=True, from_attributes=True)


def documented(schema: dict[str, Any]) -> WithJsonSchema:
    """The JSON Schema to publish for a field whose value the model checks only by type."""
    return WithJsonSchema(schema)


#: A probability or a share of rows, in [0, 1].
Fraction = Annotated[float, documented({"type": "number", "minimum": 0, "maximum": 1})]
#: A number, or null where the measure is undefined (no rows, one class, no variance).
Measure = float | None
#: A count of rows, predictions or labels.
Count = Annotated[int, Field(ge=0, le=MAX_JSON_INTEGER)]
#: A SHA-256 digest in lower-case hex.
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _written(value: object) -> object:
    """A domain object's ``datetime`` as calmon writes it (``format_timestamp``); a text as is."""
    return format_timestamp(value) if isinstance(value, datetime) else value


#: An RFC 3339 timestamp in UTC, as calmon writes them (``2026-01-01T00:00:00Z``); a reply
#: reading a domain object's ``datetime`` writes it so.
Timestamp = Annotated[str, BeforeValidator(_written), documented(TIMESTAMP_SCHEMA)]
#: An RFC 3339 timestamp, or null when there is none yet.
OptionalTimestamp = Annotated[
    str | None,
    BeforeValidator(_written),
    documented({"type": ["string", "null"], "format": "date-time"}),
]


def _listed(value: object) -> object:
    """A domain object's tuple as the list a reply holds; anything else as is."""
    return list(value) if isinstance(value, tuple) else value


#: Reads a domain object's tuple (an interval, a sequence of names) into a reply's list.
Listed = BeforeValidator(_listed)
#: A pair of fractions: a 95% interval's lower and upper bounds.
Interval = Annotated[list[Fraction], Listed, Field(min_length=2, max_length=2)]
