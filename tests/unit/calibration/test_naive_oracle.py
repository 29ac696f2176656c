"""An independent, deliberately naive per-row implementation checked against the vectorised core.

Everything here is plain Python: loops over rows and bins, ``math.exp``/``math.log``, a linear
scan for the bin of a value, an O(P * Q) pair count for the ROC AUC.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration import (
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    binary_reading,
    default_edges,
    multiclass_reading,
    validate_edges,
)


def naive_bin(v, edges):
    last = len(edges) - 2
    for m in range(last + 1):
        if edges[m] <= v < edges[m + 1]:
            return m
    return last


def naive_binned_error(values, targets, edges):
    """(ECE, MCE, supported MCE, per-bin table) of values against 0/1 targets, empty bins
    skipped.

    MCE is the largest gap over every non-empty bin; the supported MCE looks at bins of at
    least 50 rows only (NaN when there is none).
    """
    M = len(edges) - 1
    members = [[] for _ in range(M)]
    for v, t in zip(values, targets, strict=True):
        members[naive_bin(v, edges)].append((v, t))
    ece, mce, supported, table = 0.0, float("nan"), float("nan"), []
    for m, rows in enumerate(members):
        if not rows:
            continue
        mean_v = sum(v for v, _ in rows) / len(rows)
        mean_t = sum(t for _, t in rows) / len(rows)
        gap = abs(mean_v - mean_t)
        ece += len(rows) / len(values) * gap
        if not gap <= mce:
            mce = gap
        if len(rows) >= 50 and not gap <= supported:
            supported = gap
        table.append((edges[m], edges[m + 1], len(rows), mean_v, mean_t))
    return ece, mce, supported, table


def naive_multiclass(logits, labels, edges, T):
    K = len(logits[0])
    conf, correct, nll, brier, probs = [], [], 0.0, 0.0, []
    for z, y in zip(logits, labels, strict=True):
        scaled = [v / T for v in z]
        top = max(scaled)
        ex = [math.exp(v - top) for v in scaled]
        total = sum(ex)
        p = [e / total for e in ex]
        pred = 0
        for k in range(1, K):
            if z[k] > z[pred]:
                pred = k
        conf.append(p[pred])
        correct.append(1 if pred == y else 0)
        nll -= scaled[y] - top - math.log(total)
        brier += sum((p[k] - (1.0 if k == y else 0.0)) ** 2 for k in range(K))
        probs.append(p)
    N = len(labels)
    ece, mce, supported, table = naive_binned_error(conf, correct, edges)
    classwise = 0.0
    for k in range(K):
        targets = [int(y == k) for y in labels]
        e_k, _, _, _ = naive_binned_error([p[k] for p in probs], targets, edges)
        classwise += e_k / K
    return {
        "ece": ece,
        "mce": mce,
        "mce_supported": supported,
        "table": table,
        "nll": nll / N,
        "brier": brier / N,
        "accuracy": sum(correct) / N,
        "mean_confidence": sum(conf) / N,
        "classwise_ece": classwise,
    }


def naive_binary(scores, labels, edges, slope, intercept, identity, tau):
    ps, nll, brier, tp, fp, tn, fn = [], 0.0, 0.0, 0, 0, 0, 0
    for s, y in zip(scores, labels, strict=True):
        c = min(1 - 1e-6, max(1e-6, s))
        u = slope * math.log(c / (1 - c)) + intercept
        p = s if identity else 1.0 / (1.0 + math.exp(-u))
        q = c if identity else p
        nll -= math.log(q) if y == 1 else math.log(1.0 - q)
        brier += (p - y) ** 2
        if p >= tau:
            tp, fp = tp + (y == 1), fp + (y == 0)
        else:
            fn, tn = fn + (y == 1), tn + (y == 0)
        ps.append(p)
    N = len(labels)
    ece, mce, supported, table = naive_binned_error(ps, labels, edges)
    pairs, wins = 0, 0.0
    for pi, yi in zip(ps, labels, strict=True):
        if yi != 1:
            continue
        for pj, yj in zip(ps, labels, strict=True):
            if yj == 0:
                pairs += 1
                wins += 1.0 if pi > pj else 0.5 if pi == pj else 0.0
    return {
        "ece": ece,
        "mce": mce,
        "mce_supported": supported,
        "table": table,
        "nll": nll / N,
        "brier": brier / N,
        "accuracy": (tp + tn) / N,
        "auc": wins / pairs,
        "prevalence": sum(labels) / N,
        "mean_score": sum(ps) / N,
        "fp": fp,
        "fn": fn,
    }


def check_table(reading, table):
    assert len(reading.bins) == len(table)
    for b, (lo, hi, n, mean_v, mean_t) in zip(reading.bins, table, strict=True):
        assert (b.lo, b.hi, b.n) == (lo, hi, n)
        assert b.mean_confidence == pytest.approx(mean_v, abs=1e-12)
        assert b.accuracy == pytest.approx(mean_t, abs=1e-12)


EDGE_SETS = [
    default_edges(15),
    default_edges(4),
    validate_edges([0.0, 0.1, 0.35, 0.5, 0.9, 0.97, 1.0]),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("edges", EDGE_SETS, ids=["15eq", "4eq", "uneven"])
def test_multiclass_matches_naive(seed, edges):
    rng = np.random.default_rng(seed)
    N, K = int(rng.integers(1, 300)), int(rng.integers(2, 8))
    logits = rng.normal(scale=rng.uniform(0.2, 5.0), size=(N, K))
    labels = rng.integers(0, K, size=N)
    T = float(rng.uniform(0.2, 4.0))
    got = multiclass_reading(logits, labels, edges, TemperatureCalibrator(T))
    want = naive_multiclass(logits.tolist(), labels.tolist(), edges.tolist(), T)
    keys = ("ece", "mce", "mce_supported", "nll", "brier", "accuracy", "mean_confidence")
    for key in (*keys, "classwise_ece"):
        assert getattr(got, key) == pytest.approx(want[key], abs=1e-12, nan_ok=True), key
    check_table(got, want["table"])
    assert got.label_counts == tuple(int((labels == k).sum()) for k in range(K))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "calibrator",
    [IdentityCalibrator(), TemperatureCalibrator(1.7), PlattCalibrator(0.6, -0.4)],
    ids=["identity", "temperature", "platt"],
)
def test_binary_matches_naive(seed, calibrator):
    rng = np.random.default_rng(100 + seed)
    N = int(rng.integers(2, 250))
    scores = np.round(rng.beta(0.7, 1.3, size=N), int(rng.integers(2, 6)))
    labels = (rng.random(N) < 0.3 + 0.5 * scores).astype(int)
    labels[0], labels[1] = 0, 1
    c_fp, c_fn = float(rng.uniform(0.1, 5)), float(rng.uniform(0.1, 5))
    tau = c_fp / (c_fp + c_fn)
    if isinstance(calibrator, PlattCalibrator):
        slope, intercept = calibrator.slope, calibrator.intercept
    elif isinstance(calibrator, TemperatureCalibrator):
        slope, intercept = 1.0 / calibrator.temperature, 0.0
    else:
        slope, intercept = 1.0, 0.0
    edges = default_edges(10)
    got = binary_reading(scores, labels, edges, calibrator, c_fp=c_fp, c_fn=c_fn)
    want = naive_binary(
        scores.tolist(),
        labels.tolist(),
        edges.tolist(),
        slope,
        intercept,
        isinstance(calibrator, IdentityCalibrator),
        tau,
    )
    keys = ("ece", "mce", "mce_supported", "nll", "brier", "accuracy", "auc", "prevalence")
    for key in (*keys, "mean_score"):
        assert getattr(got, key) == pytest.approx(want[key], abs=1e-12, nan_ok=True), key
    assert got.threshold == tau
    assert got.expected_cost == pytest.approx((c_fp * want["fp"] + c_fn * want["fn"]) / N)
    check_table(got, want["table"])
