"""The replies of the contract routes (a stored contract, a page of them, a verification) and
the reading's shape, which a contract's baseline, a window's reading and a gate's evidence share.

Measures are null where undefined (no labeled rows, one class); bins are listed only where they
hold rows; intervals are ``[lower, upper]``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import MISSING, Field

from service.audit.replies import Problem
from service.common.replies import (
    Count,
    Fraction,
    Interval,
    Measure,
    Reply,
    Sha256,
    Timestamp,
    documented,
)
from service.contracts.requests import DRIFT_POLICY, REGISTRATION

#: The stored contract's client-supplied parts have the schema of their registration.
_REGISTERED: dict[str, Any] = REGISTRATION.schema()["properties"]
#: A drift policy as a contract stores it (every field set).
DriftPolicyReply = Annotated[dict[str, Any], documented(DRIFT_POLICY.schema())]


class Bin(Reply):
    """A non-empty reliability bin ``[lo, hi)`` (the last closed): its rows, their mean
    confidence and accuracy, and the accuracy's 95% interval."""

    lo: Fraction
    hi: Fraction
    n: Count
    mean_confidence: Fraction
    accuracy: Fraction
    ci: Interval


class PositiveClassView(Reply):
    """A two-class multiclass reading seen as binary: the second class's probability binned."""

    ece: Measure
    ece_debiased: Measure
    ece_ci: list[Measure]
    calibration_p_value: Measure
    bins: list[Bin]


class ReadingMeasures(Reply):
    """A reading's measures. Multiclass readings add ``classwise_ece`` and ``positive_class``;
    binary ones ``auc``, ``prevalence``, ``mean_score``, ``threshold``, ``expected_cost``."""

    n: Count
    ece: Measure
    ece_debiased: Measure
    ece_ci: list[Measure]
    calibration_p_value: Measure
    mce: Measure
    mce_n: int | None
    mce_supported: Measure
    mce_supported_n: int | None
    mce_min_rows: int
    nll: Measure
    brier: Measure
    accuracy: Measure
    mean_confidence: Measure
    label_counts: list[Count]
    classwise_ece: Measure | MISSING = MISSING
    positive_class: PositiveClassView | MISSING | None = Field(
        default=MISSING,
        description="two-class multiclass readings: the binary view of the second class's"
        " probability (null for other readings)",
    )
    auc: Measure | MISSING = MISSING
    prevalence: Measure | MISSING = MISSING
    mean_score: Measure | MISSING = MISSING
    threshold: Measure | MISSING = MISSING
    expected_cost: Measure | MISSING = MISSING


class Reading(ReadingMeasures):
    """A reading with its bins."""

    bins: list[Bin]


class RetirementRecord(Reply):
    """Why, when and by whom a contract was retired."""

    reason: str
    retired_at: Timestamp
    retired_by: str


class Contract(Reply):
    """A stored contract: the registered fields, the server-assigned ones, and its hash.

    The calibrator, data window, split, baseline and policy are sent as stored (the hash
    covers them): they are checked as objects and published with their registration's
    schema, so a contract stored under earlier rules still reads back."""

    id: str
    version: int
    model: str
    checkpoint: str
    task: Literal["multiclass", "binary"]
    classes: list[str]
    calibrator: Annotated[dict[str, Any], documented(_REGISTERED["calibrator"])]
    objective: str
    population: str
    outcome: str
    data_window: Annotated[dict[str, Any], documented(_REGISTERED["data_window"])]
    split: Annotated[dict[str, Any], documented(_REGISTERED["split"])]
    bin_edges: Annotated[list[Fraction], Field(min_length=2)]
    baseline: Annotated[dict[str, Any], documented(_REGISTERED["baseline"])]
    policy: DriftPolicyReply
    created_at: Timestamp
    created_by: str
    content_sha256: Sha256
    retired: bool
    retirement: RetirementRecord | None
    warnings: list[str] | MISSING = Field(
        default=MISSING,
        description="in the replies of register and fit: what the reviewer should know of the"
        " stored calibrator (a parameter on the bound of the fit's search range)",
    )


class UnreadableContract(Reply):
    """A stored contract whose fields cannot be read back, and why."""

    id: str
    model: str
    version: int
    problem: str


class ContractList(Reply):
    """A page of contracts, newest first; ``next_cursor`` is null on the last page."""

    contracts: list[Contract]
    unreadable: list[UnreadableContract] = Field(
        description="stored contracts whose fields cannot be read back"
    )
    next_cursor: str | None


class CreationEvent(Reply):
    """The audit event that recorded a contract's creation."""

    seq: int
    type: str
    content_sha256: Any


class Verification(Reply):
    """A contract's stored hash, the hash of its fields recomputed, and its creation event."""

    id: str
    valid: bool
    content_sha256: str
    recomputed_sha256: str | None
    event: CreationEvent | None
    problems: list[Problem]
