"""Contracts with many classes: bounded bucket rows, a class-wise ECE that says why it is
missing, and the migration that rewrites the buckets stored before the limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from alembic import command
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from service import create_app
from service.db.database import Database, make_engine
from service.db.migrate import alembic_config
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import contract_fields
from tests.integration.test_stream import iso, ok, post, reading
from tests.unit.calibration.test_packing import ROW_BYTES_BOUND, row_values

#: A bucket row of a K = 1,000, M = 100 contract: 5 + 3 M + K statistics, 111 refit knot
#: sums and M confidence counts, as float64 (docs/calibration.md).
K1000_M100_ROW_BYTES = 12_128


def fit_many_classes(
    client: FlaskClient, auth: Auth, model: str, n_classes: int, n_bins: int
) -> dict[str, Any]:
    rng = np.random.default_rng(n_classes)
    sets = {
        name: {
            "logits": np.round(rng.normal(size=(12, n_classes)) * 2, 6).tolist(),
            "labels": rng.integers(0, n_classes, 12).tolist(),
        }
        for name in ("fit", "eval")
    }
    body = contract_fields(
        model,
        classes=[f"c{k}" for k in range(n_classes)],
        bin_edges=np.linspace(0.0, 1.0, n_bins + 1).tolist(),
    )
    body.update(method="temperature", **sets)
    return ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))


def send_one(client: FlaskClient, auth: Auth, model: str, n_classes: int, i: int) -> None:
    """One one-item prediction request and one one-item label request; the i-th item is in
    the i-th 5-minute bucket of the last whole hour."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    ts = iso(hour + timedelta(minutes=5 * i + 1))
    logits = np.round(np.random.default_rng(i).normal(size=n_classes) * 3, 6).tolist()
    item = {"id": f"p{i}", "ts": ts, "cohort": {"region": "emea"}, "logits": logits}
    ok(post(client, auth, "/v1/predictions", {"model": model, "predictions": [item]}))
    label = {"id": f"p{i}", "label": i % n_classes, "ts": ts}
    ok(post(client, auth, "/v1/labels", {"model": model, "labels": [label]}))


def row_bytes(db: Database, model: str) -> list[int]:
    with db.engine.connect() as connection:
        return list(
            connection.scalars(
                text(
                    "SELECT length(stats) + length(confidence_counts) FROM calibration_buckets"
                    " WHERE model = :model"
                ),
                {"model": model},
            )
        )


def test_a_k_1000_contract_stores_bounded_rows_and_says_why_classwise_ece_is_null(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fitted = fit_many_classes(client, auth, "wide", 1000, 100)
    for i in range(2):
        send_one(client, auth, "wide", 1000, i)
    sizes = row_bytes(db, "wide")
    assert len(sizes) == 6  # two 5-minute buckets and their hour, in two slices
    assert set(sizes) == {K1000_M100_ROW_BYTES} and 8 * row_values("multiclass", 1000, 100) == (
        K1000_M100_ROW_BYTES
    )
    assert K1000_M100_ROW_BYTES <= ROW_BYTES_BOUND
    got = reading(client, auth, "wide")
    assert got["n_labeled"] == 2 and got["metrics"]["classwise_ece"] is None
    assert any("1,000 x 100 = 100,000" in note for note in got["notes"])
    assert got["metrics"]["label_counts"][:2] == [1, 1]
    history = client.get("/v1/models/wide/history?step=1h", headers=auth.headers())
    assert history.status_code == 200
    page = client.get(f"/ui/contracts/{fitted['id']}", headers=auth.headers())
    assert page.status_code == 200 and 'id="no-classwise"' in page.get_data(as_text=True)
    model_page = client.get("/ui/models/wide", headers=auth.headers()).get_data(as_text=True)
    assert "classwise_ece is null" in model_page and 'id="classwise"' not in model_page


def test_a_two_class_contract_keeps_its_class_wise_tables_at_100_bins(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fit_many_classes(client, auth, "pair", 2, 100)
    send_one(client, auth, "pair", 2, 1)
    assert set(row_bytes(db, "pair")) == {8 * row_values("multiclass", 2, 100)}
    got = reading(client, auth, "pair")
    assert got["metrics"]["classwise_ece"] is not None and got["notes"] == []
    page = client.get("/ui/models/pair", headers=auth.headers()).get_data(as_text=True)
    assert 'id="classwise"' in page


@pytest.fixture
def app_at_head(fresh_empty_url: str) -> Any:
    command.upgrade(alembic_config(fresh_empty_url), "head")
    made: list[Flask] = []

    def start() -> Flask:
        application = create_app({"database_url": fresh_empty_url, "admin_token": ADMIN_TOKEN})
        made.append(application)
        return application

    yield start
    for application in made:
        application.extensions["calmon.database"].dispose()


def stored_vectors(url: str) -> dict[tuple[str, str, str, str], bytes]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT model, slice, resolution, CAST(bucket_start AS TEXT), stats"
                    " FROM calibration_buckets"
                )
            ).all()
    finally:
        engine.dispose()
    return {(m, s, r, t): bytes(v) for m, s, r, t, v in rows}


def test_the_layout_migration_drops_the_tables_above_the_limit_and_keeps_every_other_value(
    fresh_empty_url: str, app_at_head: Any
) -> None:
    """Revision 0014's downgrade gives a K = 1,000 contract's vectors their old length back
    (the 3 K M class-wise values as zeros); old code would have filled them. Its upgrade then
    drops those values whatever they hold, and every other value comes back bit for bit; a
    small contract's buckets are never touched, and the readings do not change."""
    app = app_at_head()
    client, auth = app.test_client(), Auth(app.extensions["calmon.database"])
    fit_many_classes(client, auth, "wide", 1000, 100)
    fit_many_classes(client, auth, "narrow", 3, 4)
    for i in range(2):
        send_one(client, auth, "wide", 1000, i)
        send_one(client, auth, "narrow", 3, i)
    before = {m: reading(client, auth, m) for m in ("wide", "narrow")}
    app.extensions["calmon.database"].dispose()
    stored = stored_vectors(fresh_empty_url)
    config = alembic_config(fresh_empty_url)

    command.downgrade(config, "0013")
    old = stored_vectors(fresh_empty_url)
    start, size = 5 + 3 * 100 + 1000, 3 * 1000 * 100
    for key, blob in old.items():
        vector = np.frombuffer(blob, "<f8")
        if key[0] == "narrow":
            assert blob == stored[key]
            continue
        assert vector.size == start + size + 111 and not vector[start : start + size].any()
        assert np.concatenate([vector[:start], vector[start + size :]]).tobytes() == stored[key]
    rng = np.random.default_rng(5)
    engine = make_engine(fresh_empty_url)
    try:
        with engine.begin() as connection:
            for key, blob in old.items():
                if key[0] == "wide":
                    filled = np.frombuffer(blob, "<f8").copy()
                    filled[start : start + size] = rng.integers(0, 9, size)
                    connection.execute(
                        text(
                            "UPDATE calibration_buckets SET stats = :v WHERE model = :m"
                            " AND slice = :s AND resolution = :r"
                            " AND CAST(bucket_start AS TEXT) = :t"
                        ),
                        {"v": filled.tobytes(), "m": key[0], "s": key[1], "r": key[2], "t": key[3]},
                    )
    finally:
        engine.dispose()

    command.upgrade(config, "head")
    assert stored_vectors(fresh_empty_url) == stored
    again = app_at_head()
    client, auth = again.test_client(), Auth(again.extensions["calmon.database"])
    for model, was in before.items():
        now = reading(client, auth, model)
        assert now["metrics"] == was["metrics"] and now["n_labeled"] == was["n_labeled"] == 2
