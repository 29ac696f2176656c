"""Readings of the production stream: a window and cohort slice measured against the contract."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service.calibration import (
    ExpectedAccuracy,
    assess_drift,
    reading_from_stats,
    refit_from_knot_sums,
)
from service.calibration.packing import unpack, unpack_knots
from service.common.errors import NotFound
from service.common.values import format_timestamp
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.stream import bucket_store
from service.stream.bucketing import layout_of, threshold_of
from service.stream.windows import Window


@dataclass(frozen=True)
class ContractShare:
    """How much of a window a contract version accounts for."""

    contract_id: str
    version: int
    n_predictions: int
    n_labeled: int


def _costs(contract: Contract) -> tuple[float, float] | None:
    policy = contract.spec.policy
    if contract.spec.task == "binary" and policy.get("c_fp") is not None:
        return float(policy["c_fp"]), float(policy["c_fn"])
    return None


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def calibration_reading(
    session: Session, model: str, window: Window, slice_: str, now: datetime
) -> dict[str, Any]:
    """The window's reading for one slice, its bins, the baseline and the drift assessment.

    Buckets are grouped by contract version; a window spanning several versions is measured
    against the newest one that has data in it (each contract has its own calibrator and bins),
    and ``contracts_in_window`` says how the window splits.
    """
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    totals = bucket_store.window_totals(session, model, slice_, window.tiling())
    by_contract: dict[str, list[bucket_store.BucketTotals]] = defaultdict(list)
    for t in totals:
        by_contract[t.contract_id].append(t)
    contracts = {cid: contracts_store.get_contract(session, cid) for cid in by_contract}
    shares = sorted(
        (
            ContractShare(
                cid, c.version, sum(t.n_predictions for t in rows), sum(t.n_labeled for t in rows)
            )
            for cid, rows in by_contract.items()
            if (c := contracts[cid]) is not None
        ),
        key=lambda s: s.version,
        reverse=True,
    )
    if shares:
        contract = contracts[shares[0].contract_id]
    else:
        contract = contracts_store.active_contract_at(
            session, model, now
        ) or contracts_store.latest_contract(session, model)
    assert contract is not None
    rows = by_contract.get(contract.id, [])
    layout = layout_of(contract)
    vector = np.zeros(layout.size)
    for t in rows:
        if t.stats is not None:
            vector += t.stats
    stats = unpack(vector, layout)
    reading = reading_from_stats(stats, costs=_costs(contract))
    n_predictions = sum(t.n_predictions for t in rows)
    n_unlabeled = n_predictions - stats.n
    expected = (
        ExpectedAccuracy.of(
            n_unlabeled,
            sum(t.unlabeled_expected_correct for t in rows),
            sum(t.unlabeled_expected_square for t in rows),
        )
        if n_unlabeled > 0
        else None
    )
    seen = [t.confidence_counts for t in rows if t.confidence_counts is not None]
    baseline = contract.baseline_reading()
    drift = assess_drift(
        reading,
        baseline,
        contract.policy,
        edges=contract.spec.bin_edges,
        confidence_counts=np.sum(seen, axis=0) if seen else None,
        refit_temperature=refit_from_knot_sums(unpack_knots(vector, layout), stats.n),
        expected_accuracy=expected,
    )
    metrics = reading.to_dict()
    bins = metrics.pop("bins")
    notes = []
    if len(shares) > 1:
        notes.append(
            f"the window holds predictions of {len(shares)} contract versions; it is "
            f"measured against the newest, version {contract.version}"
        )
    return {
        "model": model,
        "contract": {
            "id": contract.id,
            "version": contract.version,
            "content_sha256": contract.content_sha256,
        },
        "contracts_in_window": [s.__dict__ for s in shares],
        "window": {
            "name": window.name,
            "start": format_timestamp(window.start),
            "end": format_timestamp(window.end),
        },
        "cohort": slice_,
        "n_predictions": n_predictions,
        "n_labeled": stats.n,
        "label_coverage": _json_number(stats.n / n_predictions) if n_predictions else None,
        "metrics": metrics,
        "bins": bins,
        "baseline": baseline.to_dict(),
        "policy": contract.spec.policy,
        "drift": drift.to_dict(),
        "threshold": threshold_of(contract) if contract.spec.task == "binary" else None,
        "notes": notes,
    }


def cohort_slices(session: Session, model: str) -> dict[str, Any]:
    """Every slice seen for the model with its prediction and label counts (all time)."""
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    return {
        "model": model,
        "slices": [
            {"cohort": name, "n_predictions": n, "n_labeled": labeled}
            for name, n, labeled in bucket_store.slice_counts(session, model)
        ],
    }
