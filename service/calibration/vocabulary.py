"""The closed vocabularies every layer shares: a contract's task and a reading's drift status.

Both are ``StrEnum``s: a member is its text (``Task.BINARY == "binary"``, and it hashes alike),
so stored values, JSON replies and the OpenAPI document spell them as the text does, and a
plain string read back from storage compares equal to its member.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Task(StrEnum):
    """What a contract calibrates: ``multiclass`` rows carry K >= 2 logits, ``binary`` rows one
    score in [0, 1] (the probability of the positive class)."""

    MULTICLASS = "multiclass"
    BINARY = "binary"


class Status(StrEnum):
    """A reading's drift status, declared least severe first."""

    INSUFFICIENT_DATA = "insufficient_data"
    OK = "ok"
    WARN = "warn"
    ALERT = "alert"

    @property
    def severity(self) -> int:
        """0 ``insufficient_data``, 1 ``ok``, 2 ``warn``, 3 ``alert``: higher is worse. The
        fleet overview orders models by it, and a model's refresh state stores it."""
        return _SEVERITY[self]

    @property
    def gauge_value(self) -> int:
        """The ``calmon_drift_status`` gauge's value: -1 ``insufficient_data``, 0 ``ok``,
        1 ``warn``, 2 ``alert``."""
        return self.severity - 1


_SEVERITY = {status: rank for rank, status in enumerate(Status)}
#: The statuses the fleet overview lists a slice in, worst first.
ATTENTION = (Status.ALERT, Status.WARN)


def severity_of(text: object) -> int:
    """The severity of a stored status text (``Status.severity``); -1 for None or anything
    that names no status."""
    if not isinstance(text, str) or text not in _SEVERITY:
        return -1
    return Status(text).severity


def worst_status(texts: Iterable[str]) -> str | None:
    """The most severe of the stored status texts (the first of equals; a text that names no
    status ranks with ``insufficient_data``), or None for none."""
    return max(texts, key=lambda text: max(severity_of(text), 0), default=None)
