"""Fixtures and comparison helpers for the calibration core's unit tests."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@dataclass(frozen=True)
class SeedSplit:
    """One split of the Turkish lecture's data: linear-model scores and labels."""

    scores: np.ndarray
    labels: np.ndarray
    regions: tuple[str, ...]

    @property
    def sharpened(self) -> np.ndarray:
        """The lecture's strictly increasing sharpening s^3 / (s^3 + (1 - s)^3)."""
        s3 = self.scores**3
        return s3 / (s3 + (1.0 - self.scores) ** 3)


@pytest.fixture(scope="session")
def turkish_seed() -> dict[str, SeedSplit]:
    """The validation and test splits of ``tests/data/turkish_seed.csv``."""
    rows: dict[str, list[dict[str, str]]] = {"validation": [], "test": []}
    with (DATA / "turkish_seed.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            rows[row["split"]].append(row)
    return {
        name: SeedSplit(
            scores=np.array([float(r["score"]) for r in part]),
            labels=np.array([int(r["label"]) for r in part]),
            regions=tuple(r["region"] for r in part),
        )
        for name, part in rows.items()
    }


def assert_close_tree(a: Any, b: Any, tol: float = 1e-12, path: str = "") -> None:
    """Assert two JSON-like trees are equal, floats to ``tol`` (absolute and relative)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {set(a)} != {set(b)}"
        for key in a:
            assert_close_tree(a[key], b[key], tol, f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), f"{path}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close_tree(x, y, tol, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, f"{path}: {a!r} != {b!r}"
        assert math.isclose(a, b, rel_tol=tol, abs_tol=tol), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
