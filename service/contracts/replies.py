"""The replies of the contract routes (a stored contract, a page of them, a verification) and
the reading's shape, which a contract's baseline, a window's reading and a gate's evidence share.

Measures are null where undefined (no labeled rows, one class); bins are listed only where they
hold rows; intervals are ``[lower, upper]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import MISSING, BeforeValidator, Field, create_model, model_validator

from service.audit.replies import Problem
from service.calibration.calibrators import Calibrator
from service.calibration.drift import DriftPolicy
from service.calibration.fit_warnings import FitWarningCode
from service.calibration.readings import Reading as CalibrationReading
from service.calibration.vocabulary import Task
from service.common.declared import collect
from service.common.errors import ErrorCollector, ErrorDetail
from service.common.replies import (
    Count,
    Fraction,
    Interval,
    Listed,
    Measure,
    Reply,
    Sha256,
    Timestamp,
    documented,
)
from service.contracts.model import Baseline
from service.contracts.requests import REGISTRATION
from service.contracts.spec_bodies import DRIFT_POLICY

#: The stored contract's client-supplied parts have the schema of their registration.
_REGISTERED: dict[str, Any] = REGISTRATION.schema()["properties"]


def _policy_document(value: object) -> object:
    """A ``DriftPolicy`` as a contract stores it; a stored document as is."""
    return value.to_dict() if isinstance(value, DriftPolicy) else value


#: A drift policy as a contract stores it (every field set); a reply reads a ``DriftPolicy``.
DriftPolicyReply = Annotated[
    dict[str, Any], BeforeValidator(_policy_document), documented(DRIFT_POLICY.schema())
]


def _calibrator_document(value: object) -> object:
    """A ``Calibrator`` as a contract stores it; a stored document as is."""
    return value.to_dict() if isinstance(value, Calibrator) else value


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

    @model_validator(mode="before")
    @classmethod
    def _from_reading(cls, data: Any) -> Any:
        """A calibration ``Reading`` read in its stored form (NaN as None, the keys of its
        task only); ``bins`` only where the declaration lists them."""
        if isinstance(data, CalibrationReading):
            stored = data.to_dict()
            if "bins" not in cls.model_fields:
                del stored["bins"]
            return stored
        return data


class Reading(ReadingMeasures):
    """A reading with its bins."""

    bins: list[Bin]


class RetirementRecord(Reply):
    """Why, when and by whom a contract was retired."""

    reason: str
    retired_at: Timestamp
    retired_by: str


class DataWindowReply(Reply):
    """When the calibration data was collected: RFC 3339 timestamps."""

    start: str
    end: str


class SplitReply(Reply):
    """How the fit and eval sets were drawn, and each set's fingerprint (null, or absent from
    a stored contract, when unknown)."""

    method: str
    fit_fingerprint: str | None = None
    eval_fingerprint: str | None = None


class BaselineSplitReply(Reply):
    """One split's readings as stored: uncalibrated and calibrated, and the summary of their
    per-row NLL differences when recorded."""

    uncalibrated: dict[str, Any]
    calibrated: dict[str, Any]
    nll_difference: dict[str, Any] | MISSING = MISSING


class BaselineReply(Reply):
    """The baseline as stored: each split's readings, and a ``method: auto`` fit's selection."""

    fit: BaselineSplitReply
    eval: BaselineSplitReply
    selection: Any | MISSING = MISSING

    @model_validator(mode="before")
    @classmethod
    def _from_baseline(cls, data: Any) -> Any:
        """A contract's ``Baseline`` read as its document as registered (what the hash
        covers)."""
        return dict(data.document) if isinstance(data, Baseline) else data


class FitWarningReply(Reply):
    """One fit warning (``calibration.fit_warnings``): its code and a message with its numbers."""

    code: FitWarningCode
    message: str


class Contract(Reply):
    """A stored contract: the registered fields, the server-assigned ones, and its hash.

    The calibrator, data window, split, baseline and policy are sent as stored (the hash
    covers them): they are checked for the shape the service reads (objects with their keys;
    the readings, calibrator and policy read by their own readers) and published with their
    registration's schema, so a contract stored under earlier rules still reads back.
    A stored row is read through this declaration too (``stored_field_problems``)."""

    id: str
    version: int
    model: str
    checkpoint: str
    task: Literal[Task.MULTICLASS, Task.BINARY]
    classes: Annotated[list[str], Listed]
    calibrator: Annotated[
        dict[str, Any],
        BeforeValidator(_calibrator_document),
        documented(_REGISTERED["calibrator"]),
    ]
    objective: str
    population: str
    outcome: str
    data_window: Annotated[DataWindowReply, documented(_REGISTERED["data_window"])]
    split: Annotated[SplitReply, documented(_REGISTERED["split"])]
    bin_edges: Annotated[list[Fraction], Listed, Field(min_length=2)]
    baseline: Annotated[BaselineReply, documented(_REGISTERED["baseline"])]
    policy: DriftPolicyReply
    created_at: Timestamp
    created_by: str
    content_sha256: Sha256
    retired: bool
    retirement: RetirementRecord | None
    warnings: list[FitWarningReply] | MISSING = Field(
        default=MISSING,
        description="in the replies of register and fit: what the reviewer should know of the"
        " stored calibrator and its baseline (eval NLL worse than uncalibrated beyond its noise,"
        " a parameter on a bound, overfit, a set smaller than the gate's default"
        " min_eval_samples)",
    )


@cache
def _stored_fields(names: frozenset[str]) -> type[Reply]:
    """The ``Contract`` reply's declarations of ``names`` alone, as a model."""
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in Contract.model_fields.items()
        if name in names
    }
    return create_model("StoredContractFields", __base__=Reply, **fields)


def stored_field_problems(fields: Mapping[str, Any]) -> list[ErrorDetail]:
    """What of a stored contract's ``fields`` (by the reply's field names, as read from the
    row) the ``Contract`` reply does not accept, each at its path (``classes[0]``); empty when
    every one conforms. A row is read through the declaration of its reply, so a field of
    another shape is an unreadable contract, never read as something else."""
    errors = ErrorCollector()
    collect(_stored_fields(frozenset(fields)), dict(fields), errors, {})
    return errors.details


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
