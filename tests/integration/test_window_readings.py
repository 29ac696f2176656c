"""Readings from bucket statistics alone: refit temperature, label-free signals, rebuilds."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from alembic import command
from flask.testing import FlaskClient
from sqlalchemy import text

from service.calibration import (
    TemperatureCalibrator,
    confidence_shift,
    fit_temperature,
    multiclass_probabilities,
)
from service.calibration.binning import bin_index
from service.db.database import Database, make_engine
from service.db.migrate import alembic_config
from service.stream.maintenance import REBUILD_BUCKETS, rebuild_buckets, run_pending
from tests.integration.conftest import Auth
from tests.integration.factories import QUARTER_EDGES, fit_body
from tests.integration.test_stream import iso, ok, post, reading

MODEL = "glyphs"


def contract(client: FlaskClient, auth: Auth) -> dict[str, Any]:
    body = fit_body(MODEL, policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5})
    return ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))


def drifted(n: int, seed: int, t_true: float) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3) logits and labels drawn from softmax(z / t_true): over-confident when t > 1."""
    rng = np.random.default_rng(seed)
    z = np.round(rng.normal(size=(n, 3)) * 2.5, 6)
    p = np.exp(z / t_true)
    p /= p.sum(axis=1, keepdims=True)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return z, np.minimum(labels, 2)


def send(
    client: FlaskClient, auth: Auth, z: np.ndarray, labels: np.ndarray | None, prefix: str
) -> None:
    now = datetime.now(UTC)
    for start in range(0, len(z), 500):
        rows = range(start, min(start + 500, len(z)))
        ok(
            post(
                client,
                auth,
                "/v1/predictions",
                {
                    "model": MODEL,
                    "predictions": [
                        {
                            "id": f"{prefix}{i}",
                            "ts": iso(now - timedelta(minutes=1 + i % 600)),
                            "cohort": {"shard": f"s{i % 3}"},
                            "logits": z[i].tolist(),
                        }
                        for i in rows
                    ],
                },
            )
        )
        if labels is not None:
            ok(
                post(
                    client,
                    auth,
                    "/v1/labels",
                    {
                        "model": MODEL,
                        "labels": [
                            {"id": f"{prefix}{i}", "label": int(labels[i]), "ts": iso(now)}
                            for i in rows
                        ],
                    },
                )
            )


def test_the_refit_temperature_of_a_window_equals_the_full_data_optimum(
    client: FlaskClient, auth: Auth
) -> None:
    fitted = contract(client, auth)
    T0 = fitted["calibrator"]["temperature"]
    z, y = drifted(3000, seed=1, t_true=1.8)
    send(client, auth, z, y, "r")
    got = reading(client, auth, MODEL)["drift"]
    exact = fit_temperature(z / T0, y)
    assert abs(math.log(got["refit_temperature"]) - math.log(exact.temperature)) <= 1e-3
    lo, hi = got["refit_temperature_ci"]
    assert lo < exact.temperature < hi and hi / lo < 1.3
    shard = reading(client, auth, MODEL, "window=24h&cohort=shard:s1")["drift"]
    rows = np.arange(3000) % 3 == 1
    exact_shard = fit_temperature(z[rows] / T0, y[rows])
    assert abs(math.log(shard["refit_temperature"]) - math.log(exact_shard.temperature)) <= 1e-3


def test_label_free_signals_count_every_prediction(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fitted = contract(client, auth)
    calibrator = TemperatureCalibrator(fitted["calibrator"]["temperature"])
    z, y = drifted(400, seed=2, t_true=1.0)
    send(client, auth, z[:100], y[:100], "a")
    send(client, auth, z[100:], None, "b")
    got = reading(client, auth, MODEL)
    assert (got["n_predictions"], got["n_labeled"]) == (400, 100)
    confidence = multiclass_probabilities(calibrator, z).max(axis=1)
    edges = np.array(QUARTER_EDGES, dtype=np.float64)
    window_counts = np.bincount(bin_index(confidence, edges, True), minlength=4)
    baseline = fitted["baseline"]["eval"]["calibrated"]["bins"]
    base_counts = np.zeros(4)
    for b in baseline:
        base_counts[QUARTER_EDGES.index(b["lo"])] = b["n"]
    shift = confidence_shift(base_counts, window_counts)
    drift = got["drift"]
    assert drift["confidence_psi"] == pytest.approx(shift.psi, abs=1e-12)
    assert drift["confidence_psi_no_shift"] == pytest.approx(shift.no_shift, abs=1e-12)
    assert drift["confidence_shift_p_value"] == pytest.approx(shift.p_value, abs=1e-12)
    unlabeled = confidence[100:]
    assert drift["expected_accuracy"] == pytest.approx(unlabeled.mean(), abs=1e-12)
    spread = 1.959963984540054 * math.sqrt((unlabeled * (1 - unlabeled)).sum()) / 300
    lo, hi = drift["expected_accuracy_ci"]
    assert (lo, hi) == pytest.approx((unlabeled.mean() - spread, unlabeled.mean() + spread))


def all_readings(client: FlaskClient, auth: Auth) -> list[dict[str, Any]]:
    out = []
    for cohort in ("", "&cohort=shard:s0", "&cohort=shard:s2"):
        for window in ("1h", "24h"):
            got = reading(client, auth, MODEL, f"window={window}{cohort}")
            got.pop("window")
            out.append(got)
    return out


def test_buckets_rebuilt_from_stored_rows_give_the_same_readings(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract(client, auth)
    z, y = drifted(900, seed=3, t_true=1.3)
    send(client, auth, z[:600], y[:600], "c")
    send(client, auth, z[600:], None, "d")
    before = all_readings(client, auth)
    with db.session() as session:
        assert rebuild_buckets(session, MODEL) == 900
    after = all_readings(client, auth)
    for a, b in zip(before, after, strict=True):
        assert a["n_predictions"] == b["n_predictions"] and a["n_labeled"] == b["n_labeled"]
        for key in ("ece", "ece_debiased", "nll", "brier", "accuracy"):
            assert a["metrics"][key] == pytest.approx(b["metrics"][key], abs=1e-9)
        for key in ("refit_temperature", "confidence_psi", "expected_accuracy"):
            assert a["drift"][key] == pytest.approx(b["drift"][key], abs=1e-9)


def test_pending_maintenance_keeps_the_service_unready_until_run(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract(client, auth)
    z, y = drifted(200, seed=4, t_true=1.0)
    send(client, auth, z, y, "e")
    before = reading(client, auth, MODEL)
    with db.engine.begin() as connection:
        connection.execute(text("DELETE FROM calibration_buckets"))
        connection.execute(
            text("INSERT INTO maintenance_tasks (name, requested_at) VALUES (:n, :t)"),
            {"n": REBUILD_BUCKETS, "t": datetime.now(UTC)},
        )
    unready = client.get("/readyz")
    assert unready.status_code == 503
    assert unready.get_json()["error"]["code"] == "maintenance_pending"
    with db.session() as session:
        assert run_pending(session) == [REBUILD_BUCKETS]
    assert client.get("/readyz").status_code == 200
    again = reading(client, auth, MODEL)["metrics"]
    for key in ("n", "ece", "ece_debiased", "nll", "brier", "mce"):
        assert again[key] == pytest.approx(before["metrics"][key], abs=1e-12)


def test_the_bucket_layout_migration_clears_buckets_and_asks_for_a_rebuild(
    fresh_empty_url: str,
) -> None:
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0006")
    engine = make_engine(fresh_empty_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO calibration_buckets (model, slice, resolution, bucket_start,"
                    " contract_id, n_predictions, n_labeled, unlabeled_expected_correct, stats)"
                    " VALUES ('m', 'all', '1h', :t, 'c', 1, 1, 0, :s)"
                ),
                {"t": datetime(2026, 11, 1, tzinfo=UTC), "s": b"\x00" * 8},
            )
        command.upgrade(config, "head")
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT count(*) FROM calibration_buckets")) == 0
            tasks = connection.scalars(text("SELECT name FROM maintenance_tasks")).all()
        assert tasks == [REBUILD_BUCKETS]
        command.downgrade(config, "0006")
    finally:
        engine.dispose()


def test_a_stored_baseline_that_cannot_be_read_back_is_a_conflict_not_a_crash(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fitted = contract(client, auth)
    with db.engine.begin() as connection:
        stored = connection.scalar(
            text("SELECT baseline FROM contracts WHERE id = :id"), {"id": fitted["id"]}
        )
        baseline = json.loads(stored) if isinstance(stored, str) else stored
        baseline["eval"] = {"calibrated": {"n": 1}}
        connection.execute(
            text("UPDATE contracts SET baseline = :b WHERE id = :id"),
            {"b": json.dumps(baseline), "id": fitted["id"]},
        )
    got = client.get(f"/v1/models/{MODEL}/calibration?window=24h", headers=auth.headers())
    assert got.status_code == 409
    error = got.get_json()["error"]
    assert error["code"] == "unreadable_contract" and error["details"][0]["field"].startswith(
        "baseline.eval"
    )
    assert client.get(f"/ui/contracts/{fitted['id']}", headers=auth.headers()).status_code < 500
    gate = client.post("/v1/gate", json={"contract_id": fitted["id"]}, headers=auth.headers())
    assert gate.status_code == 409
