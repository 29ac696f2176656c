"""The replies of the gate routes: a decision with its evidence, and a page of decisions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from service.calibration.vocabulary import Status
from service.common.replies import Count, Measure, Reply, Sha256, Timestamp, documented
from service.contracts.replies import Bin, PositiveClassView
from service.gate.requests import GATE_POLICY


class GateCheck(Reply):
    """One check of the gate: whether it passed, what it saw against what it allows."""

    name: str
    passed: bool
    observed: Any = Field(description="the measured value (a number, a count, or null)")
    threshold: Any = Field(description="the policy's limit (a number, a flag, or null)")
    message: str


class EvidenceSource(Reply):
    """Where the evidence came from: the contract's held-out baseline or a supplied evaluation,
    with the fingerprint of its rows when known."""

    kind: Literal["contract_eval_baseline", "evaluation"]
    fingerprint: str | None


class DecidedContract(Reply):
    """The contract a decision is about."""

    id: str
    model: str
    version: int
    content_sha256: Sha256


class PairOfMeasures(Reply):
    """A measure before and after calibration."""

    uncalibrated: Measure
    calibrated: Measure


class NllDifference(Reply):
    """The per-row NLL difference of calibration (calibrated minus uncalibrated, nats): its
    mean, one-sided 97.5% lower bound and the tolerance the check allows (1% of the
    uncalibrated held-out log loss)."""

    mean: Measure
    lower_bound: Measure
    tolerance: Measure


class LiveSlice(Reply):
    """One exported slice of the model as the gate read it: its stored drift status and the
    reasons for it, when that reading was computed and under which contract version."""

    cohort: str
    window: str
    status: Literal[Status.INSUFFICIENT_DATA, Status.OK, Status.WARN, Status.ALERT]
    reasons: list[str]
    computed_at: Timestamp
    contract_id: str
    contract_version: int


class LiveEvidence(Reply):
    """Every exported slice of the model when the gate decided (``max_live_status`` set)."""

    slices: list[LiveSlice]


class GateEvidence(Reply):
    """What the checks measured: the calibrated reading's ECE and its inference, NLL and Brier
    before and after calibration, and the reliability bins."""

    source: EvidenceSource
    baseline_source: Literal["measured", "supplied"]
    contract: DecidedContract
    n: Count
    ece: Measure
    ece_debiased: Measure
    ece_ci: list[Measure]
    calibration_p_value: Measure
    positive_class: PositiveClassView | None
    nll: PairOfMeasures
    nll_difference: NllDifference | None
    brier: PairOfMeasures
    reliability: list[Bin]
    bin_edges: list[float]
    live: LiveEvidence | None = Field(
        default=None, description="the model's exported slices now, when max_live_status is set"
    )


class GateDecision(Reply):
    """A stored gate decision: pass only if every check passed; the hashes cover the policy
    and the evidence as stored."""

    id: str
    contract_id: str
    model: str
    decided_at: Timestamp
    decided_by: str
    decision: Literal["pass", "fail"]
    checks: list[GateCheck]
    evidence: GateEvidence
    policy: Annotated[dict[str, Any], documented({**GATE_POLICY.schema(), "type": "object"})]
    policy_sha256: Sha256
    evidence_sha256: Sha256


class GateDecisions(Reply):
    """A page of decisions, newest first; ``next_cursor`` is null on the last page."""

    decisions: list[GateDecision]
    next_cursor: str | None
