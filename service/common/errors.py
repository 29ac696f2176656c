"""Domain errors. The HTTP edge (``service.web.http_errors``) maps each to one status and code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The most details an error reply lists; it gives the total beside them.
MAX_DETAILS = 100


@dataclass(frozen=True)
class ErrorDetail:
    """One problem with one item of a request: ``item`` is its index in a batch, if any."""

    field: str
    message: str
    item: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"field": self.field, "message": self.message}
        if self.item is not None:
            out["item"] = self.item
        return out


class CalmonError(Exception):
    """Base of every error calmon reports to a client.

    ``details`` may be the first of more problems: ``details_total`` then says how many were
    found and ``items`` how many batch items they concern (else both are counted from
    ``details``).
    """

    code = "error"

    def __init__(
        self,
        message: str,
        details: list[ErrorDetail] | None = None,
        *,
        details_total: int | None = None,
        items: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.details_total = len(self.details) if details_total is None else details_total
        self.items = (
            len({d.item for d in self.details if d.item is not None}) if items is None else items
        )


class InvalidJson(CalmonError):
    """The body is not JSON calmon accepts: a NaN/Infinity token, a key repeated within one
    object (400)."""

    code = "bad_request"


class ValidationFailed(CalmonError):
    """The request is well-formed JSON but some items or fields are invalid (422)."""

    code = "validation_failed"


class NotFound(CalmonError):
    """An unknown model, contract or resource (404)."""

    code = "not_found"


class Conflict(CalmonError):
    """The request contradicts stored state (409)."""

    code = "conflict"


class LeakageError(ValidationFailed):
    """The fit and eval sets are the same rows (422 ``leakage``)."""

    code = "leakage"


class UnreadableContract(Conflict):
    """A stored contract holds a field the service can no longer read (409)."""

    code = "unreadable_contract"


class NoActiveContract(Conflict):
    """The model has no active contract to bind predictions to (409)."""

    code = "no_active_contract"


@dataclass
class ErrorCollector:
    """Accumulates every problem of a request so the reply can list them all at once.

    It keeps the first ``MAX_DETAILS`` (as many as a reply lists) and counts them all, with the
    batch items they concern: a body naming millions of problems costs a count, not millions of
    details.
    """

    details: list[ErrorDetail] = field(default_factory=list)
    total: int = 0
    items: set[int] = field(default_factory=set)

    def add(self, field_name: str, message: str, item: int | None = None) -> None:
        self.total += 1
        if item is not None:
            self.items.add(item)
        if len(self.details) < MAX_DETAILS:
            self.details.append(ErrorDetail(field_name, message, item))

    def __bool__(self) -> bool:
        return self.total > 0

    def raise_if_any(self, message: str = "the request has invalid fields") -> None:
        if self.total:
            raise ValidationFailed(
                message, list(self.details), details_total=self.total, items=len(self.items)
            )
