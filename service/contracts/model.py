"""Calibration contracts as typed objects: the spec a client supplies, the stored contract, its
baseline, and the content hash.

A contract is immutable once stored. Its ``content_sha256`` is the SHA-256 of the canonical JSON
(``service.common.hashing``) of every field except the hash itself and the retirement, which is
a later event. The rules that need the contract's task live here once: the calibration methods
of each task (``method_problem``), and a binary contract's decision threshold is
``c_fp / (c_fp + c_fn)`` when its policy sets costs, else 0.5 (``Contract.threshold``).

The bounds on what a client may register are in ``service.contracts.requests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

from service.calibration import (
    CalibrationInputError,
    Calibrator,
    DriftPolicy,
    Reading,
    calibrator_from_dict,
    decision_threshold,
    validate_edges,
)
from service.calibration.nll_comparison import NllDifference
from service.calibration.vocabulary import Task
from service.common.errors import ErrorDetail, UnreadableContract
from service.common.hashing import sha256_of
from service.common.values import format_timestamp

BaselineSource = Literal["measured", "supplied"]
TASKS = tuple(Task)
#: The decision threshold of a binary contract whose policy sets no costs.
DEFAULT_THRESHOLD = 0.5
#: Largest number of classes (K) and of bin edges a contract may have
#: (``service.contracts.requests`` says why).
MAX_CLASSES = 1000
MAX_BIN_EDGES = 101


#: The calibration methods a fit request may name, per task (``auto`` chooses among them).
FIT_METHODS: dict[str, tuple[str, ...]] = {
    Task.BINARY: ("temperature", "platt", "beta", "isotonic", "histogram"),
    Task.MULTICLASS: ("temperature", "vector", "matrix", "isotonic"),
}


def method_problem(method: str, task: str | None) -> str | None:
    """Why a calibration method does not fit a task, or None (``FIT_METHODS``)."""
    if task not in FIT_METHODS or method in FIT_METHODS[task] or method in ("identity", "auto"):
        return None
    return f"{method} is not a method for {task} contracts; use one of {list(FIT_METHODS[task])}"


@dataclass(frozen=True)
class DataWindow:
    """When the calibration data was collected: RFC 3339 timestamps as calmon writes them."""

    start: str
    end: str

    def to_dict(self) -> dict[str, str]:
        return {"start": self.start, "end": self.end}


@dataclass(frozen=True)
class Split:
    """How the fit and held-out sets were drawn, and the SHA-256 fingerprint of each set's rows
    (``LabeledSet.fingerprint``), when known."""

    method: str
    fit_fingerprint: str | None = None
    eval_fingerprint: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "method": self.method,
            "fit_fingerprint": self.fit_fingerprint,
            "eval_fingerprint": self.eval_fingerprint,
        }

    @property
    def disjoint(self) -> bool:
        """Whether both fingerprints are known and differ."""
        known = self.fit_fingerprint is not None and self.eval_fingerprint is not None
        return known and self.fit_fingerprint != self.eval_fingerprint


@dataclass(frozen=True)
class BaselineSplit:
    """The readings of one labeled set at fit time: raw and calibrated outputs of the same rows,
    and the summary of their per-row NLL differences (calibrated minus uncalibrated)."""

    uncalibrated: Reading
    calibrated: Reading
    nll_difference: NllDifference | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"uncalibrated": self.uncalibrated.to_dict(), "calibrated": self.calibrated.to_dict()}
        if self.nll_difference is not None:
            out["nll_difference"] = self.nll_difference.to_dict()
        return out


@dataclass(frozen=True)
class Baseline:
    """The contract's evidence at fit time: per split (``fit``, ``eval``) a ``BaselineSplit``.

    ``document`` is the JSON as registered, which the content hash covers and replies show;
    readings are read from it on demand with the core's reader, so a stored contract whose
    baseline that reader refuses still lists, and fails only where the reading is needed.
    """

    document: Mapping[str, Any]

    @classmethod
    def of(cls, fit: BaselineSplit, held_out: BaselineSplit) -> Baseline:
        """The baseline of readings calmon measured itself."""
        return cls({"fit": fit.to_dict(), "eval": held_out.to_dict()})

    def reading(self, split: str = "eval", which: str = "calibrated") -> Reading:
        """One reading; raises ``CalibrationInputError`` (or ``KeyError``/``TypeError``) naming
        what cannot be read."""
        return Reading.from_dict(self.document[split][which], f"baseline.{split}.{which}")

    def nll_difference(self, split: str = "eval") -> NllDifference | None:
        """The split's per-row NLL differences, if the baseline carries them."""
        stored = self.document[split].get("nll_difference")
        return None if stored is None else NllDifference.from_dict(stored)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


@dataclass(frozen=True)
class Retirement:
    """Why, when and by whom a contract was retired (an audit event; the contract never
    changes)."""

    reason: str
    retired_at: datetime
    retired_by: str


@dataclass(frozen=True)
class ContractSpec:
    """Validated client-supplied contract fields (everything but the server-assigned ones).

    ``bin_edges`` are the M + 1 reliability bin edges, strictly increasing from 0 to 1.
    """

    model: str
    checkpoint: str
    task: Task
    classes: tuple[str, ...]
    calibrator: Calibrator
    objective: str
    population: str
    outcome: str
    data_window: DataWindow
    split: Split
    bin_edges: tuple[float, ...]
    baseline: Baseline
    policy: DriftPolicy

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (what a ``POST /v1/contracts`` body carries)."""
        return {
            "model": self.model,
            "checkpoint": self.checkpoint,
            "task": self.task,
            "classes": list(self.classes),
            "calibrator": self.calibrator.to_dict(),
            "objective": self.objective,
            "population": self.population,
            "outcome": self.outcome,
            "data_window": self.data_window.to_dict(),
            "split": self.split.to_dict(),
            "bin_edges": list(self.bin_edges),
            "baseline": self.baseline.to_dict(),
            "policy": self.policy.to_dict(),
        }

    @property
    def costs(self) -> tuple[float, float] | None:
        """``(c_fp, c_fn)`` of a binary contract whose policy sets them, else None."""
        return self.policy.costs if self.task == Task.BINARY else None

    @property
    def threshold(self) -> float:
        """The binary decision threshold: ``c_fp / (c_fp + c_fn)`` with costs, else 0.5."""
        costs = self.policy.costs
        return DEFAULT_THRESHOLD if costs is None else decision_threshold(*costs)


@dataclass(frozen=True)
class Contract:
    """A stored contract: its spec, whose fields it exposes as its own (what the ``Contract``
    reply reads), and the server-assigned fields."""

    id: str
    version: int
    spec: ContractSpec
    created_at: datetime
    created_by: str
    content_sha256: str
    retirement: Retirement | None = None

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def checkpoint(self) -> str:
        return self.spec.checkpoint

    @property
    def task(self) -> Task:
        return self.spec.task

    @property
    def classes(self) -> tuple[str, ...]:
        return self.spec.classes

    @property
    def calibrator(self) -> Calibrator:
        return self.spec.calibrator

    @property
    def objective(self) -> str:
        return self.spec.objective

    @property
    def population(self) -> str:
        return self.spec.population

    @property
    def outcome(self) -> str:
        return self.spec.outcome

    @property
    def data_window(self) -> DataWindow:
        return self.spec.data_window

    @property
    def split(self) -> Split:
        return self.spec.split

    @property
    def bin_edges(self) -> tuple[float, ...]:
        """The M + 1 bin edges as registered (``edges`` is the array)."""
        return self.spec.bin_edges

    @property
    def baseline(self) -> Baseline:
        return self.spec.baseline

    @property
    def edges(self) -> np.ndarray:
        """The (M + 1,) float64 bin edges."""
        return np.asarray(self.spec.bin_edges, dtype=np.float64)

    @property
    def policy(self) -> DriftPolicy:
        return self.spec.policy

    @property
    def threshold(self) -> float:
        return self.spec.threshold

    @property
    def retired(self) -> bool:
        return self.retirement is not None

    def baseline_reading(self, split: str = "eval", which: str = "calibrated") -> Reading:
        """One stored baseline reading, read back with the code that validated it.

        A contract stored before registration used that code can hold a baseline it cannot
        read: that is an ``UnreadableContract`` (409) naming the field, never a crash.
        """
        field = f"baseline.{split}.{which}"
        try:
            return self.spec.baseline.reading(split, which)
        except (CalibrationInputError, KeyError, TypeError) as exc:
            raise self._unreadable(getattr(exc, "field", field), exc) from exc

    def baseline_nll_difference(self, split: str = "eval") -> NllDifference | None:
        """The split's stored per-row NLL differences, if any (``UnreadableContract`` if they
        cannot be read back)."""
        try:
            return self.spec.baseline.nll_difference(split)
        except (CalibrationInputError, KeyError, TypeError, AttributeError) as exc:
            raise self._unreadable(f"baseline.{split}.nll_difference", exc) from exc

    def _unreadable(self, field: str, exc: Exception) -> UnreadableContract:
        return UnreadableContract(
            f"contract {self.id} (version {self.version}) stores a baseline that cannot be "
            "read back; register a new version",
            [ErrorDetail(field, str(exc))],
        )

    def hashed_document(self) -> dict[str, Any]:
        return hashed_document(self.id, self.version, self.spec, self.created_at, self.created_by)


def hashed_document(
    contract_id: str, version: int, spec: ContractSpec, created_at: datetime, created_by: str
) -> dict[str, Any]:
    """The fields the content hash covers, as JSON-ready values."""
    return {
        "id": contract_id,
        "version": version,
        **spec.to_dict(),
        "created_at": format_timestamp(created_at),
        "created_by": created_by,
    }


def content_sha256(document: Mapping[str, Any]) -> str:
    """The SHA-256 of a contract's hashed document (``hashed_document``)."""
    return sha256_of(document)


def spec_from_stored(fields: Mapping[str, Any]) -> ContractSpec:
    """A spec from the JSON of a stored contract, its bin edges checked as registration checks
    them; ``CalibrationInputError`` (or ``KeyError``, ``TypeError``, ``ValueError``) names what
    cannot be read."""
    window, split = fields["data_window"], fields["split"]
    return ContractSpec(
        model=fields["model"],
        checkpoint=fields["checkpoint"],
        task=Task(fields["task"]),
        classes=tuple(fields["classes"]),
        calibrator=calibrator_from_dict(fields["calibrator"], len(fields["classes"])),
        objective=fields["objective"],
        population=fields["population"],
        outcome=fields["outcome"],
        data_window=DataWindow(window["start"], window["end"]),
        split=Split(split["method"], split.get("fit_fingerprint"), split.get("eval_fingerprint")),
        bin_edges=tuple(float(e) for e in validate_edges(fields["bin_edges"], "bin_edges")),
        baseline=Baseline(dict(fields["baseline"])),
        policy=DriftPolicy.from_dict(fields["policy"]),
    )
