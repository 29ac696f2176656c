"""The replies of the stream routes: ingest acknowledgements, readings, cohorts, history
(readings in the shape ``service.contracts.replies`` declares)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.calibration.drift import Drift as CalibrationDrift
from service.calibration.vocabulary import Status
from service.common.replies import (
    Count,
    Listed,
    Measure,
    OptionalTimestamp,
    Reply,
    Sha256,
    Timestamp,
)
from service.contracts.replies import Bin, DriftPolicyReply, Reading, ReadingMeasures

#: A reading's drift status, as its text (a stored reading holds plain text).
StatusText = Literal[Status.INSUFFICIENT_DATA, Status.OK, Status.WARN, Status.ALERT]


#: What ``labels_unfolded`` counts.
UNFOLDED = (
    "the model's labels acknowledged as joined but not counted in this answer: a read first"
    " counts the model's waiting labels when few wait (all of them with consistent=true) and"
    " states here those it leaves out"
)


class PredictionsAccepted(Reply):
    """A prediction batch stored: new rows, ids seen before with the same content, the binding
    contract, and the waiting labels the new predictions joined or discarded."""

    accepted: Count
    duplicates: Count
    contract_id: str
    joined_pending_labels: Count = Field(
        description="labels that waited for these predictions and are now joined"
    )
    discarded_pending_labels: Count = Field(
        description="labels that waited for these predictions and are deleted: the predictions'"
        " contract has no class by their name or index"
    )


class LabelConflict(Reply):
    """A label that differs from the one stored for its id (not applied)."""

    id: str
    label: int | str
    stored_label: int | str
    reason: str


class LabelsApplied(Reply):
    """A label batch applied: joined to stored predictions, waiting for theirs, seen before,
    in conflict, and refused waiting labels."""

    joined: Count
    pending: Count
    duplicates: Count
    conflicts: list[LabelConflict]
    rejected_pending: Count
    rejected_pending_ids: list[str]


class ContractRef(Reply):
    """The contract a reading was measured against."""

    id: str
    version: int
    content_sha256: Sha256


class ContractShare(Reply):
    """How much of a window a contract version accounts for."""

    contract_id: str
    version: int
    n_predictions: Count
    n_labeled: Count


class WindowRange(Reply):
    """A reading's window ``[start, end)``; ``name`` for a trailing window (``24h``)."""

    name: str | None
    start: Timestamp
    end: Timestamp


class Detector(Reply):
    """A status detector's evidence: the ECE level it tests and its e-value against its
    threshold (null before it has rows)."""

    level: float
    value: Measure
    threshold: Measure
    pattern: str | None
    view: str | None
    rows: int | None


class Detectors(Reply):
    """The alert and warn detectors."""

    alert: Detector
    warn: Detector


class Drift(Reply):
    """The window against the baseline: deltas, the refit temperature, confidence shift,
    the status and its reasons."""

    ece_delta: Measure
    ece_debiased_delta: Measure
    nll_delta: Measure
    refit_temperature: Measure
    refit_temperature_ci: list[float] | None
    confidence_psi: Measure
    confidence_psi_no_shift: Measure
    confidence_shift_p_value: Measure
    prevalence_shift: Measure
    expected_accuracy: Measure
    expected_accuracy_ci: list[float] | None
    status: StatusText
    reasons: list[str]
    detectors: Detectors

    @model_validator(mode="before")
    @classmethod
    def _from_drift(cls, data: Any) -> Any:
        """A calibration ``Drift`` read in its JSON form (NaN as None)."""
        return data.to_dict() if isinstance(data, CalibrationDrift) else data


class Calibration(Reply):
    """The reading of a window and cohort slice, with bins, the baseline and drift; what it
    leaves out (labels not yet folded) and when the fold last ran."""

    model: str
    contract: ContractRef
    contracts_in_window: list[ContractShare]
    window: WindowRange
    cohort: str
    n_predictions: Count
    n_labeled: Count
    label_coverage: Measure
    metrics: ReadingMeasures
    bins: Annotated[list[Bin], Listed]
    baseline: Reading
    policy: DriftPolicyReply
    drift: Drift
    threshold: Measure = Field(
        description="binary: the score above which the cost-minimising decision is positive,"
        " c_fp / (c_fp + c_fn); null for multiclass"
    )
    notes: Annotated[list[str], Listed]
    labels_unfolded: Count = Field(description=UNFOLDED)
    last_fold_at: OptionalTimestamp


class CohortSlice(Reply):
    """A cohort slice seen for a model, with its counts over all time."""

    cohort: str
    n_predictions: Count
    n_labeled: Count


class Cohorts(Reply):
    """Every slice seen for a model."""

    model: str
    slices: list[CohortSlice]


class HistoryContract(Reply):
    """The contract a history's policy and baseline come from."""

    id: str
    version: int


class BaselineEce(Reply):
    """The contract's held-out ECE."""

    ece: Measure
    ece_debiased: Measure


class HistoryPoint(Reply):
    """One step of a history: its counts, measures and status; null measures for a step
    without labeled rows."""

    start: Timestamp
    contract_version: int | None
    n_predictions: Count
    n_labeled: Count
    label_coverage: Measure
    ece: Measure
    ece_debiased: Measure
    ece_ci: Annotated[list[float] | None, Listed]
    nll: Measure
    brier: Measure
    accuracy: Measure
    refit_temperature: Measure
    refit_temperature_ci: Annotated[list[float] | None, Listed]
    confidence_psi: Measure
    confidence_psi_no_shift: Measure
    status: StatusText
    labels_unfolded: Count = Field(description=UNFOLDED)
    last_fold_at: OptionalTimestamp


class History(Reply):
    """A cohort slice's readings per step, oldest first."""

    model: str
    cohort: str
    start: Timestamp
    end: Timestamp
    step_seconds: int
    contract: HistoryContract
    policy: DriftPolicyReply
    baseline: BaselineEce
    points: Annotated[list[HistoryPoint], Listed]
