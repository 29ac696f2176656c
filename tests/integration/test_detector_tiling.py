"""The simulated detectors of the benchmark equal the service's on a simulated clock.

A binary model receives a miscalibrated stream, 25 rows in every 5-minute bucket for six
hours; at refreshes of every phase within the hour, ``calibration_reading`` (hour buckets
inside a window, 5-minute buckets at its ragged ends, the buckets before it as lookback) gives
the alert and warn detectors' values, and ``rule_simulation.ServiceStream`` gives them from the
5-minute buckets alone. Reading every 5-minute bucket as a block of its own gives other values.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from flask.testing import FlaskClient

from service.calibration.drift import StatusLevels
from service.calibration.packing import unpack_fields
from service.calibration.readings import bins_inference
from service.calibration.sequential import block_increments
from service.calibration.series import step_views
from service.common.clock import utcnow
from service.contracts.service import current_contract
from service.db.database import Database
from service.stream import bucket_store
from service.stream.bucketing import layout_of
from service.stream.cohorts import ALL
from service.stream.fold import fold_model
from service.stream.monitoring import calibration_reading
from service.stream.windows import FINE, HOUR, Window, floor_to
from tests.integration.conftest import Auth
from tests.integration.factories import binary_fit_body
from tests.integration.test_stream import iso, minutes_ago, ok, post
from tests.support.rule_simulation import BLOCK_ROWS, HOUR_BUCKETS, ServiceStream
from tests.support.simulation import trailing_values

MODEL = "tiled"
WINDOWS = {"1h": 13, "3h": 37, "24h": 289}


def test_the_simulated_tiling_gives_the_service_detector_values(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    ok(post(client, auth, "/v1/contracts/fit", binary_fit_body(MODEL), role="admin"))
    buckets = 6 * HOUR_BUCKETS + 5
    start = floor_to(utcnow() - timedelta(hours=9), HOUR)
    rng = np.random.default_rng(42)
    scores = np.round(rng.uniform(0.05, 0.95, size=(buckets, BLOCK_ROWS)), 4)
    labels = (rng.uniform(size=scores.shape) < scores**1.6).astype(int)
    rows = [
        {
            "id": f"r{b}-{j}",
            "ts": iso(start + b * FINE + timedelta(seconds=30 + 60 * j)),
            "cohort": {},
            "score": float(scores[b, j]),
        }
        for b in range(buckets)
        for j in range(BLOCK_ROWS)
    ]
    for first in range(0, len(rows), 500):
        batch = rows[first : first + 500]
        ok(post(client, auth, "/v1/predictions", {"model": MODEL, "predictions": batch}))
        given = [
            {"id": r["id"], "label": int(labels.flat[first + i]), "ts": minutes_ago(0)}
            for i, r in enumerate(batch)
        ]
        ok(post(client, auth, "/v1/labels", {"model": MODEL, "labels": given}))
    with db.session() as session:
        fold_model(session, MODEL, utcnow())
    with db.read_session() as session:
        contract = current_contract(session, MODEL, utcnow())
        layout = layout_of(contract)
        fine = bucket_store.window_totals(
            session, MODEL, ALL, [("5m", start, start + buckets * FINE)]
        )
        fine = sorted(fine, key=lambda t: t.bucket_start)
        assert len(fine) == buckets
        matrix = np.stack([t.stats for t in fine if t.stats is not None])
        tables = step_views(unpack_fields(matrix, layout), layout)[0]
        stream = ServiceStream(tables)
        differs = 0
        for end in range(buckets - HOUR_BUCKETS, buckets):
            now = start + end * FINE + timedelta(minutes=2)
            for name, size in WINDOWS.items():
                got = calibration_reading(session, MODEL, Window.trailing(name, now), ALL, now)
                levels = StatusLevels.of(contract.policy, bins_inference(got.baseline.bins))
                evidence = got.drift.evidence
                for kind, design in (("alert", levels.alert_design), ("warn", levels.warn_design)):
                    simulated = stream.values(np.array([end]), size, design)[0]
                    served = evidence[kind]["value"]
                    assert abs(simulated - served) <= 1e-9 * max(1.0, served), (end, name, kind)
                    every_bucket = block_increments(tables, design)[0][:, : end + 1]
                    naive = trailing_values(every_bucket, size)[-1]
                    differs += abs(naive - simulated) > 1e-6
        assert differs > 0
