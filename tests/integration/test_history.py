"""GET /v1/models/{model}/history: each step's reading equals the window reading of that step."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from flask.testing import FlaskClient

from service.stream.history import CSV_COLUMNS
from service.stream.windows import floor_to
from tests.integration.conftest import Auth
from tests.integration.test_stream import iso, ok
from tests.integration.test_window_readings import MODEL, contract, drifted, send


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def history(client: FlaskClient, auth: Auth, query: str) -> dict:
    return ok(client.get(f"/v1/models/{MODEL}/history?{query}", headers=auth.headers("reader")))


@pytest.mark.parametrize(("hours", "least_compared"), [(1, 8), (2, 4)])
def test_each_step_is_the_reading_of_its_own_window(
    client: FlaskClient, auth: Auth, hours: int, least_compared: int
) -> None:
    """Two-hour steps sum two hour buckets each; the window reading sums the same buckets."""
    contract(client, auth)
    z, y = drifted(1800, seed=7, t_true=1.4)
    send(client, auth, z[:1500], y[:1500], "h")
    send(client, auth, z[1500:], None, "u")
    now = datetime.now(UTC)
    start, end = now - timedelta(hours=11), now + timedelta(minutes=5)
    step = timedelta(hours=hours)
    got = history(client, auth, f"start={iso(start)}&end={iso(end)}&step={hours}h")
    points = got["points"]
    assert got["step_seconds"] == 3600 * hours
    assert parse(got["start"]) == floor_to(start, step)
    assert sum(p["n_predictions"] for p in points) == 1800
    assert sum(p["n_labeled"] for p in points) == 1500
    assert [p["start"] for p in points] == sorted(p["start"] for p in points)
    compared = 0
    for p in points:
        if not p["n_predictions"]:
            assert p["status"] == "insufficient_data" and p["ece"] is None
            continue
        step_start = parse(p["start"])
        window = f"start={iso(step_start)}&end={iso(step_start + step)}"
        one = ok(client.get(f"/v1/models/{MODEL}/calibration?{window}", headers=auth.headers()))
        assert (p["n_predictions"], p["n_labeled"]) == (one["n_predictions"], one["n_labeled"])
        assert p["status"] == one["drift"]["status"]
        if not p["n_labeled"]:
            continue
        metrics = one["metrics"]
        for key in ("ece", "ece_debiased", "nll", "brier", "accuracy"):
            assert p[key] == pytest.approx(metrics[key], abs=1e-9), key
        assert p["ece_ci"] == pytest.approx(metrics["ece_ci"], abs=1e-9)
        assert p["refit_temperature"] == pytest.approx(one["drift"]["refit_temperature"], rel=1e-9)
        assert p["confidence_psi"] == pytest.approx(one["drift"]["confidence_psi"], rel=1e-9)
        compared += 1
    assert compared >= least_compared
    cohort = history(client, auth, f"start={iso(start)}&end={iso(end)}&cohort=shard:s1")
    assert cohort["cohort"] == "shard=s1"
    assert sum(p["n_predictions"] for p in cohort["points"]) == 600


def test_five_minute_steps_read_the_fine_buckets(client: FlaskClient, auth: Auth) -> None:
    contract(client, auth)
    z, y = drifted(300, seed=8, t_true=1.0)
    send(client, auth, z, y, "f")
    now = datetime.now(UTC)
    got = history(client, auth, f"start={iso(now - timedelta(hours=6))}&end={iso(now)}&step=5m")
    assert len(got["points"]) >= 72
    assert sum(p["n_labeled"] for p in got["points"]) == 300


def test_csv_holds_the_same_points(client: FlaskClient, auth: Auth) -> None:
    contract(client, auth)
    z, y = drifted(400, seed=9, t_true=1.0)
    send(client, auth, z, y, "c")
    query = "step=2h&format=csv"
    response = client.get(f"/v1/models/{MODEL}/history?{query}", headers=auth.headers("reader"))
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(response.get_data(as_text=True))))
    assert tuple(rows[0]) == CSV_COLUMNS
    as_json = history(client, auth, "step=2h")["points"]
    assert len(rows) - 1 == len(as_json) in (84, 85)
    labeled = CSV_COLUMNS.index("n_labeled")
    assert sum(int(r[labeled]) for r in rows[1:]) == 400


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("step=7m", "step"),
        ("step=1s", "step"),
        ("step=five", "step"),
        ("start=2026-01-01T00:00:00Z&end=2026-01-30T00:00:00Z&step=5m", "step"),
        ("start=2026-11-02T00:00:00Z&end=2026-11-01T00:00:00Z", "end"),
        ("format=xml", "format"),
        ("window=24h", "window"),
    ],
)
def test_bad_queries_name_their_parameter(
    client: FlaskClient, auth: Auth, query: str, field: str
) -> None:
    contract(client, auth)
    response = client.get(f"/v1/models/{MODEL}/history?{query}", headers=auth.headers())
    assert response.status_code == 422, response.get_json()
    assert [d["field"] for d in response.get_json()["error"]["details"]] == [field]


def test_unknown_model(client: FlaskClient, auth: Auth) -> None:
    assert client.get("/v1/models/nobody/history", headers=auth.headers()).status_code == 404


@pytest.mark.parametrize("end", ["2000-01-01T02:58:58Z", "2000-01-03T00:00:00Z"])
def test_a_default_start_is_never_before_the_earliest_timestamp(
    client: FlaskClient, auth: Auth, end: str
) -> None:
    contract(client, auth)
    found = history(client, auth, f"end={end}")
    assert parse(found["start"]) == datetime(2000, 1, 1, tzinfo=UTC)
    assert parse(found["end"]) >= parse(end)
