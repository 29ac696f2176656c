"""A window reading as the API shows it: counts, coverage, the contract and its shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from service.calibration import IdentityCalibrator, assess_drift, binary_reading
from service.contracts.model import Contract
from service.stream.monitoring import ContractShare, WindowReading
from service.stream.replies import Calibration
from service.stream.windows import Window
from tests.unit.stream.conftest import binary_contract

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def window_reading(contract: Contract, n_predictions: int) -> WindowReading:
    scores = np.array([0.1, 0.4, 0.6, 0.9])
    labels = np.array([0, 1, 1, 1])
    edges = np.asarray(contract.spec.bin_edges)
    reading = binary_reading(scores, labels, edges, calibrator=IdentityCalibrator())
    drift = assess_drift(reading, reading, contract.policy, edges=contract.spec.bin_edges)
    return WindowReading(
        model="m",
        contract=contract,
        shares=(ContractShare(contract.id, 1, n_predictions, reading.n),),
        window=Window.trailing("24h", NOW),
        cohort="region=eu",
        n_predictions=n_predictions,
        reading=reading,
        baseline=reading,
        drift=drift,
    )


def replied(reading: WindowReading) -> dict[str, Any]:
    """The reading as the calibration reply declares it."""
    return Calibration.model_validate(reading).model_dump(mode="json", exclude_unset=True)


def test_the_reply_carries_counts_coverage_and_the_contract() -> None:
    contract = binary_contract(c_fp=1.0, c_fn=3.0)
    reply = replied(window_reading(contract, 10))
    assert (reply["n_predictions"], reply["n_labeled"], reply["label_coverage"]) == (10, 4, 0.4)
    assert reply["contract"] == {"id": "c-1", "version": 1, "content_sha256": "0" * 64}
    assert reply["contracts_in_window"] == [
        {"contract_id": "c-1", "version": 1, "n_predictions": 10, "n_labeled": 4}
    ]
    assert reply["window"]["name"] == "24h" and reply["cohort"] == "region=eu"
    assert reply["threshold"] == 0.25 and reply["policy"]["c_fn"] == 3.0
    assert sum(b["n"] for b in reply["bins"]) == 4 and "bins" not in reply["metrics"]
    assert reply["drift"]["status"] in {"insufficient_data", "ok", "warn", "alert"}


def test_a_window_without_predictions_has_no_coverage() -> None:
    reading = window_reading(binary_contract(), 0)
    assert reading.label_coverage is None and replied(reading)["label_coverage"] is None
