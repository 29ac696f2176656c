"""Class-wise reliability of a window: the (K, M) tables the bucket statistics keep, per class
(for multiclass contracts of at most ``packing.CLASSWISE_MAX_CELLS`` classes times bins).

Read-only, from the same buckets as ``monitoring.calibration_reading``; the caller names the
contract version whose buckets are summed (a window reading's ``contract``, the newest version
with data in the window), so both agree on which predictions they measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from service.calibration.classwise import ClassReliability, class_reliability
from service.calibration.packing import unpack
from service.calibration.vocabulary import Task
from service.contracts.model import Contract
from service.stream import bucket_store
from service.stream.bucketing import layout_of
from service.stream.windows import Window


@dataclass(frozen=True)
class ClassCurve:
    """One class's reliability in a window, with the class's name."""

    name: str
    reliability: ClassReliability


@dataclass(frozen=True)
class ClasswiseReading:
    """Every class's reliability over a window and slice, measured against ``contract``;
    ``n`` labeled predictions (each contributes to every class's table)."""

    contract: Contract
    window: Window
    cohort: str
    n: int
    classes: tuple[ClassCurve, ...]


def classwise_reading(
    session: Session, contract: Contract, window: Window, slice_: str
) -> ClasswiseReading | None:
    """The class-wise reliability of ``contract``'s predictions in the window and slice; None
    for a binary contract (its reliability diagram already is the positive class's) and for a
    multiclass one whose buckets keep no class-wise tables (``bucketing.classwise_note``)."""
    layout = layout_of(contract)
    if contract.spec.task != Task.MULTICLASS or not layout.classwise:
        return None
    vector = np.zeros(layout.size)
    for totals in bucket_store.window_totals(session, contract.model, slice_, window.tiling()):
        if totals.contract_id == contract.id and totals.stats is not None:
            vector += totals.stats
    stats = unpack(vector, layout)
    curves = tuple(
        ClassCurve(name, reliability)
        for name, reliability in zip(contract.spec.classes, class_reliability(stats), strict=True)
    )
    return ClasswiseReading(contract, window, slice_, stats.n, curves)
