"""A small binary contract built in memory, for the stream's pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.calibration import DriftPolicy, IdentityCalibrator
from service.contracts.model import Baseline, Contract, ContractSpec, DataWindow, Split


def binary_contract(edges: tuple[float, ...] = (0.0, 0.5, 1.0), **policy: float) -> Contract:
    """A binary contract with the identity calibrator (``p`` is the score itself)."""
    spec = ContractSpec(
        model="m",
        checkpoint="c",
        task="binary",
        classes=("negative", "positive"),
        calibrator=IdentityCalibrator(),
        objective="nll",
        population="p",
        outcome="o",
        data_window=DataWindow("2026-10-01T00:00:00.000000Z", "2026-10-31T00:00:00.000000Z"),
        split=Split("random"),
        bin_edges=edges,
        baseline=Baseline({}),
        policy=DriftPolicy(0.05, 0.02, 10, **policy),
    )
    return Contract("c-1", 1, spec, datetime(2026, 11, 1, tzinfo=UTC), "tests", "0" * 64)


@pytest.fixture
def contract() -> Contract:
    return binary_contract()
