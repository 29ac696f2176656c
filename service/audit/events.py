"""The payload of each kind of audit event: what the code that writes an event puts in its
``details``, and what the code that verifies or reads an event finds there.

An event's stored ``details`` are its payload's fields as a JSON object, keyed by field name in
field order (``key`` in a field's metadata names a key that is no Python name, ``from``; a field
marked ``legacy`` is left out when None, as events written before it existed lack it). The
hash chain covers the stored JSON, so a kind's keys and their order never change. ``read``
takes the details of any event of its kind, written before a field existed too: a key the
stored details lack reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self


@dataclass(frozen=True)
class EventPayload:
    """The details of one kind of event (``TYPE``)."""

    TYPE: ClassVar[str]

    def details(self) -> dict[str, Any]:
        """The details as stored: each field under its key, in field order."""
        return {
            f.metadata.get("key", f.name): getattr(self, f.name)
            for f in fields(self)
            if not (f.metadata.get("legacy") and getattr(self, f.name) is None)
        }

    @classmethod
    def read(cls, details: Mapping[str, Any]) -> Self:
        """The payload of stored ``details`` (a key they lack reads as None; values are as
        stored, unchecked: a verifier compares them with the rows they vouch for)."""
        return cls(**{f.name: details.get(f.metadata.get("key", f.name)) for f in fields(cls)})


@dataclass(frozen=True)
class ContractCreated(EventPayload):
    """A contract stored: its version and content hash, and where its baseline came from
    (``measured`` by calmon, or ``supplied`` with the registration)."""

    version: int
    content_sha256: str
    baseline_source: str


@dataclass(frozen=True)
class ContractRegistered(ContractCreated):
    """A contract fitted elsewhere, registered."""

    TYPE = "contract_registered"


@dataclass(frozen=True)
class ContractFitted(ContractCreated):
    """A contract fitted by calmon."""

    TYPE = "contract_fitted"


#: The kinds of event that create a contract, by type.
CREATION_EVENTS: dict[str, type[ContractCreated]] = {
    kind.TYPE: kind for kind in (ContractRegistered, ContractFitted)
}


@dataclass(frozen=True)
class ContractRetired(EventPayload):
    """A contract retired: the retirement row as a document and its SHA-256 (events written
    before the row was recorded carry the version and reason only)."""

    TYPE = "contract_retired"

    version: int
    reason: str
    retirement: dict[str, Any] | None = field(default=None, metadata={"legacy": True})
    retirement_sha256: str | None = field(default=None, metadata={"legacy": True})


@dataclass(frozen=True)
class GateDecided(EventPayload):
    """A gate decision stored: its id and outcome, the checks that failed, and the digests of
    its stored evidence and policy."""

    TYPE = "gate_decided"

    decision_id: str
    decision: str
    failed_checks: list[str]
    evidence_sha256: str
    policy_sha256: str


@dataclass(frozen=True)
class StatusChanged(EventPayload):
    """A reading's drift status changed: the cohort slice and window, the status before and
    after, and the reasons of the new one."""

    TYPE = "drift_status_changed"

    cohort: str
    window: str
    from_status: str | None = field(metadata={"key": "from"})
    to: str
    reasons: list[str]


@dataclass(frozen=True)
class PredictionsPruned(EventPayload):
    """Retention ran: rows before ``cutoff`` (ISO 8601) deleted, and waiting labels expired."""

    TYPE = "predictions_pruned"

    cutoff: str
    predictions: int
    labels: int
    pending_labels_expired: int


@dataclass(frozen=True)
class TokenCreated(EventPayload):
    """An API token created, by name and role."""

    TYPE = "token_created"

    name: str
    role: str


@dataclass(frozen=True)
class TokenRevoked(EventPayload):
    """An API token revoked, with the browser sessions that ended with it."""

    TYPE = "token_revoked"

    name: str
    role: str
    sessions_ended: int


@dataclass(frozen=True)
class KeyEnabled(EventPayload):
    """A segment of the chain keyed with ``key_id`` begins (after ``previous_key_id``'s)."""

    TYPE = "audit_key_enabled"

    key_id: str
    previous_key_id: str | None


@dataclass(frozen=True)
class AuditResealed(EventPayload):
    """The keyed head written anew: why, the problem the old head had, that head (None if
    there was none) and where the log ended."""

    TYPE = "audit_resealed"

    reason: str | None
    problem: str
    previous_head: dict[str, Any] | None
    log_end: dict[str, Any]
