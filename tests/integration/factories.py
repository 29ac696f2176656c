"""Request bodies for tests, built from the reference data (the fit set is that of
tests/unit/calibration/test_reference_values.py)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

REFERENCE_FIT_LOGITS = [
    [3, 1, 0],
    [2.5, 1, 0],
    [3, 0.5, 0],
    [1.5, 2, 0],
    [0.5, 0, 1.5],
    [2, 2.2, 0],
]
REFERENCE_FIT_LABELS = [0, 0, 1, 1, 2, 0]
REFERENCE_EVAL_LOGITS = [
    [1, 0, 0],
    [0, 2, 0],
    [0, 0, 1.5],
    [2, 1, 0],
    [0.2, 0.1, 0],
    [1, 3, 0],
    [0, 1, 2],
    [2, 0, 1],
]
REFERENCE_EVAL_LABELS = [0, 1, 2, 1, 0, 1, 2, 0]
QUARTER_EDGES = [0, 0.25, 0.5, 0.75, 1]


def contract_fields(model: str = "glyphs", **overrides: Any) -> dict[str, Any]:
    """The client-supplied fields shared by register and fit (multiclass, K = 3)."""
    fields: dict[str, Any] = {
        "model": model,
        "checkpoint": "sha256:" + "ab" * 32,
        "task": "multiclass",
        "classes": ["a", "b", "c"],
        "objective": "nll",
        "population": "glyph images from the October intake",
        "outcome": "top-label correct",
        "data_window": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-31T00:00:00Z"},
        "split": {"method": "random by image id"},
        "bin_edges": QUARTER_EDGES,
        "policy": {"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5},
    }
    fields.update(overrides)
    return fields


def fit_body(model: str = "glyphs", **overrides: Any) -> dict[str, Any]:
    body = contract_fields(model)
    body.update(
        method="temperature",
        fit={"logits": REFERENCE_FIT_LOGITS, "labels": REFERENCE_FIT_LABELS},
        eval={"logits": REFERENCE_EVAL_LOGITS, "labels": REFERENCE_EVAL_LABELS},
    )
    body.update(overrides)
    return body


def registration_body(fitted: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """A ``POST /v1/contracts`` body carrying a fitted contract's calibrator and baseline."""
    server_fields = {
        "id",
        "version",
        "created_at",
        "created_by",
        "content_sha256",
        "retired",
        "retirement",
        "warnings",
    }
    body = {k: copy.deepcopy(v) for k, v in fitted.items() if k not in server_fields}
    if model is not None:
        body["model"] = model
    return body


def binary_fit_body(model: str) -> dict[str, Any]:
    """A Platt fit request of a binary contract: 40 fit and 40 eval rows of calibrated scores."""
    rng = np.random.default_rng(3)
    scores = rng.uniform(0.05, 0.95, size=80)
    labels = (rng.uniform(size=80) < scores).astype(int).tolist()
    body = contract_fields(
        model,
        task="binary",
        classes=["stay", "churn"],
        bin_edges=[0, 0.25, 0.5, 0.75, 1],
        policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5, "c_fp": 1, "c_fn": 3},
    )
    body.update(
        method="platt",
        fit={"scores": scores[:40].tolist(), "labels": labels[:40]},
        eval={"scores": scores[40:].tolist(), "labels": labels[40:]},
    )
    return body
