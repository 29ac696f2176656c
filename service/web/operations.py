"""What each route tells the OpenAPI document about itself, declared beside the route.

``@operation(...)`` sits under the route's ``@bp.get``/``@bp.post`` and its ``@requires``: it
names the operation, its reply declaration (or the other media types it answers with), its
request body and query declarations, and the statuses it can answer with besides those every
operation of its kind has. The summary is the first paragraph of the route's docstring, the
roles come from the permission ``requires`` enforces, the path parameters from the route's
rule: none is written twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from service.common.declared import Declared
from service.common.replies import Reply

F = TypeVar("F", bound=Callable[..., Any])

JSON = "application/json"
CSV = "text/csv"
SVG = "image/svg+xml"
PROMETHEUS_TEXT = "text/plain"
ARROW_STREAM = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True)
class Operation:
    """One operation of the HTTP API.

    ``reply`` declares the JSON success reply (None for a route that answers only in ``media``);
    ``media`` lists further success content types, each with its schema; ``body`` is the
    request body's declaration (a component of the document, under its name) and
    ``body_media`` the content types it is accepted in; ``query`` declares the query string;
    ``errors`` lists statuses beyond the ones every authenticated route, body and query has;
    ``links`` lets a client (and schemathesis) chain from the reply to other operations.
    """

    operation_id: str
    summary: str
    reply: type[Reply] | None = None
    reply_description: str = "the result"
    status: int = 200
    media: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    body: Declared[Any] | None = None
    body_media: tuple[str, ...] = (JSON,)
    query: type[BaseModel] | None = None
    errors: tuple[int, ...] = ()
    links: Mapping[str, Any] | None = None


def summary_of(view: Callable[..., Any]) -> str:
    """The first paragraph of ``view``'s docstring on one line, without its closing period."""
    doc = inspect.getdoc(view)
    if not doc:
        raise ValueError(f"{view.__qualname__} has no docstring to take its summary from")
    return " ".join(doc.split("\n\n", 1)[0].split()).removesuffix(".")


def operation(**declared: Any) -> Callable[[F], F]:
    """Attach an ``Operation`` to a view (the arguments are its fields but ``summary``, which
    is the view's docstring's first paragraph)."""

    def decorator(view: F) -> F:
        view.operation = Operation(summary=summary_of(view), **declared)  # type: ignore[attr-defined]
        return view

    return decorator


def operation_of(view: Callable[..., Any]) -> Operation | None:
    """The ``Operation`` of a view, looked up through the decorators that wrap it."""
    while view is not None:
        found = getattr(view, "operation", None)
        if isinstance(found, Operation):
            return found
        view = getattr(view, "__wrapped__", None)  # type: ignore[assignment]
    return None
