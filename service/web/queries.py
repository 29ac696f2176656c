"""Query-string and path parameters: known names only, typed, with 4xx replies naming them.

Bounds: ``limit`` is 1 to the endpoint's maximum in ASCII digits; a ``cursor`` carries a
sequence number of at most 2^63 - 1 (the database's bigint); timestamps lie in the range
``service.common.values.timestamp_problem`` accepts around the time of the request; no parameter
(path or query, name or value) holds a NUL, which PostgreSQL cannot compare or store.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Protocol, Self, TypeVar

from flask import request
from pydantic import (
    BaseModel,
    ConfigDict,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
)

from service.common.declared import TIMESTAMP_SCHEMA, checked_timestamp, json_pattern, problem
from service.common.errors import ErrorCollector, ErrorDetail, NotFound, ValidationFailed
from service.common.values import (
    NAME_MESSAGE,
    NAME_PATTERN,
    text_problem,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_SEQ = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def check_text_arguments() -> None:
    """Refuse a request whose path or query parameters hold text calmon cannot store.

    A path segment with a NUL names nothing (404); a query parameter with one is a 422 naming it.
    Meant to run before every view (``before_app_request``): every route passes these values to
    the database.
    """
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and text_problem(value) is not None:
            raise NotFound(
                f"no {name} with that name: it holds a NUL character",
                [ErrorDetail(name, "contains a NUL character")],
            )
    errors = ErrorCollector()
    for name, values in request.args.lists():
        label = name.replace("\x00", "\\x00")
        if text_problem(name) is not None:
            errors.add(label, "the parameter name contains a NUL character")
        for value in values:
            problem = text_problem(value)
            if problem is not None:
                errors.add(label, problem)
    errors.raise_if_any("invalid query parameters")


def _cursor(raw: Any) -> int:
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        prefix, _, number = text.partition(":")
        if prefix != "seq" or not _DIGITS.fullmatch(number) or int(number) > MAX_SEQ:
            raise ValueError(text)
        return int(number)
    except (TypeError, ValueError, binascii.Error, UnicodeDecodeError):
        raise problem("not a cursor this endpoint returned") from None


def limit_of(maximum: int) -> Any:
    """A page size: 1 to ``maximum`` in ASCII digits."""

    def check(raw: Any) -> int:
        if not isinstance(raw, str) or not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= maximum:
            raise problem(f"expected 1..{maximum}")
        return int(raw)

    return Annotated[
        int,
        PlainValidator(check),
        WithJsonSchema({"type": "integer", "minimum": 1, "maximum": maximum}),
    ]


def choice(*options: str) -> Any:
    """One of ``options``, spelled exactly."""

    def check(raw: Any) -> str:
        if raw not in options:
            raise problem(f"must be {' or '.join(options)}")
        return str(raw)

    return Annotated[
        str, PlainValidator(check), WithJsonSchema({"type": "string", "enum": options})
    ]


def matching(pattern: re.Pattern[str], message: str) -> Any:
    """Text matching ``pattern`` whole."""

    def check(raw: Any) -> str:
        if not isinstance(raw, str) or not pattern.fullmatch(raw):
            raise problem(message)
        return raw

    return Annotated[
        str | None,
        PlainValidator(check),
        WithJsonSchema({"type": "string", "pattern": json_pattern(pattern)}),
    ]


#: An RFC 3339 timestamp with a zone within the accepted range around the time of the request.
TimestampParam = Annotated[
    datetime | None, PlainValidator(checked_timestamp), WithJsonSchema(TIMESTAMP_SCHEMA)
]
#: The opaque cursor of a previous page: the sequence number it continues after (or before).
CursorParam = Annotated[
    int | None, PlainValidator(_cursor), WithJsonSchema({"type": "string", "minLength": 1})
]


def _text(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise problem("must not be empty")
    return raw


#: Any non-empty text (NUL is refused before every view).
TextParam = Annotated[
    str | None, PlainValidator(_text), WithJsonSchema({"type": "string", "minLength": 1})
]
#: A model name.
NameParam = matching(NAME_PATTERN, NAME_MESSAGE)


class Query(BaseModel):
    """A route's query string: the parameters it takes, each typed, none other.

    ``parse`` reads the request's query string (the first value of a repeated parameter) and
    raises ``ValidationFailed`` naming every invalid or unknown parameter.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @classmethod
    def parse(cls, now: datetime | None = None) -> Self:
        """The request's query string as this declaration, checked at ``now``."""
        raw = {name: request.args.get(name) for name in request.args}
        try:
            return cls.model_validate(raw, context={"now": now or datetime.now(UTC)})
        except ValidationError as exc:
            takes = ", ".join(cls.model_fields) or "no parameters"
            details = [
                ErrorDetail(
                    str(error["loc"][0]) if error["loc"] else "(query)",
                    f"unknown query parameter; this endpoint takes {takes}"
                    if error["type"] == "extra_forbidden"
                    else error["msg"],
                )
                for error in exc.errors(include_url=False)
            ]
            raise ValidationFailed("invalid query parameters", details) from None

    def given(self, name: str) -> bool:
        """Whether the request named ``name`` (rather than leaving it to its default)."""
        return name in self.model_fields_set


class NoQuery(Query):
    """A route that takes no query parameters."""


class PageQuery(Query):
    """A page of a listing: ``limit`` rows after (or before) ``cursor``."""

    limit: limit_of(MAX_LIMIT) = DEFAULT_LIMIT  # type: ignore[valid-type]
    cursor: CursorParam = None


def encode_cursor(seq: int) -> str:
    """The opaque cursor of the page after the row numbered ``seq`` (``CursorParam`` reads it)."""
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


class Paging(Protocol):
    """A list route's parsed query: ``limit`` rows a page, continuing after ``cursor``."""

    @property
    def limit(self) -> int: ...

    @property
    def cursor(self) -> int | None: ...


Row = TypeVar("Row")


@dataclass(frozen=True)
class Page(Generic[Row]):
    """A page of a listing: its rows, and the cursor of the next page (None on the last)."""

    rows: Sequence[Row]
    next_cursor: str | None


def fetch_page(
    query: Paging,
    fetch: Callable[[int | None, int], Sequence[Row]],
    seq: Callable[[Row], int],
) -> Page[Row]:
    """The page ``query`` asks for, through ``fetch(cursor, n)``: up to ``n`` rows of the
    listing, in its order, continuing after the row numbered ``cursor`` (None: from the start).

    One row beyond ``query.limit`` is fetched to tell whether another page follows; if one does,
    its cursor continues after the page's last row (``seq`` gives a row's number), so a listing
    that fills its last page exactly ends without an empty page.
    """
    rows = fetch(query.cursor, query.limit + 1)
    kept = rows[: query.limit]
    return Page(kept, encode_cursor(seq(kept[-1])) if len(rows) > query.limit else None)


def fetch_newest_first(
    query: PageQuery,
    listing: Callable[..., Sequence[Row]],
    seq: Callable[[Row], int],
) -> Page[Row]:
    """The page ``query`` asks for of a newest-first listing (``fetch_page``), read by
    ``listing(before_seq=cursor, limit=n, **filters)``: the filters are the query's parameters
    other than ``limit`` and ``cursor``, passed by the names the query declares them by."""
    filters = {
        name: getattr(query, name)
        for name in type(query).model_fields
        if name not in PageQuery.model_fields
    }
    return fetch_page(
        query, lambda cursor, limit: listing(**filters, before_seq=cursor, limit=limit), seq
    )
