"""Late labels alone in their bucket wait for the fold; the fold counts each exactly once."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from service.config import load_settings
from service.db.database import Database
from service.export import refresher as refresher_module
from service.export.refresher import Refresher, refresh_all
from service.stream import fold, fold_store, label_join
from service.stream.maintenance import rebuild_buckets
from service.stream.retention import prune
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body

MODEL = "late"
#: One prediction an hour over the days before now, each labeled (its label alone in its bucket).
N = 60


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.get_json()
    return response.get_json()  # type: ignore[no-any-return]


def predictions(now: datetime, n: int = N, first_day: int = 40) -> list[dict[str, Any]]:
    """``n`` predictions an hour apart from ``first_day`` days before ``now``."""
    start = now - timedelta(days=first_day)
    return [
        {
            "id": f"p{i:04d}",
            "ts": iso(start + timedelta(hours=i)),
            "cohort": {"region": "eu" if i % 2 else "us"},
            "logits": [1.5 - 0.05 * i, 0.1 * (i % 7), 0.0],
            "label": i % 3,
        }
        for i in range(n)
    ]


def post(
    client: FlaskClient, auth: Auth, kind: str, items: list[dict[str, Any]], model: str = MODEL
) -> dict:
    body = {"model": model, kind: items}
    return ok(client.post(f"/v1/{kind}", json=body, headers=auth.headers("ingest")))


def send(
    client: FlaskClient,
    auth: Auth,
    rows: list[dict[str, Any]],
    now: datetime,
    requests: int = 1,
    model: str = MODEL,
) -> None:
    """Store the predictions, then their labels in ``requests`` requests (each queues its
    lone late labels as one batch), received ``now``."""
    ok(client.post("/v1/contracts/fit", json=fit_body(model), headers=auth.headers()))
    unlabeled = [{k: v for k, v in r.items() if k != "label"} for r in rows]
    post(client, auth, "predictions", unlabeled, model)
    labels = [{"id": r["id"], "label": r["label"], "ts": iso(now)} for r in rows]
    for part in range(requests):
        sent = labels[part::requests]
        assert post(client, auth, "labels", sent, model)["joined"] == len(sent)


def window(client: FlaskClient, auth: Auth, now: datetime, query: str = "") -> dict[str, Any]:
    start = iso(now - timedelta(days=45)).replace(":", "%3A")
    end = iso(now).replace(":", "%3A")
    url = f"/v1/models/{MODEL}/calibration?start={start}&end={end}{query}"
    return ok(client.get(url, headers=auth.headers()))


def bucket_sums(db: Database, model: str = MODEL) -> list[tuple[Any, ...]]:
    """Every bucket of ``model``: key, counts and blobs (the whole aggregate state)."""
    with db.session() as session:
        rows = session.execute(
            text(
                "SELECT slice, resolution, bucket_start, n_predictions, n_labeled,"
                " unlabeled_expected_correct, stats FROM calibration_buckets"
                " WHERE model = :model ORDER BY slice, resolution, bucket_start"
            ),
            {"model": model},
        ).all()
    return [
        (*r[:5], round(float(r[5]), 9), bytes(r[6]) if r[6] is not None else None) for r in rows
    ]


def rebuilt(db: Database) -> list[tuple[Any, ...]]:
    """The buckets as the stored rows give them (a rebuild from scratch)."""
    with db.session() as session:
        rebuild_buckets(session, MODEL)
    return bucket_sums(db)


def queued(db: Database) -> int:
    with db.read_session() as session:
        return fold_store.fold_status(session, MODEL).unfolded


def queued_after(db: Database, seconds: float) -> int:
    """What is still queued once the queue is empty or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while (left := queued(db)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_read_after_an_acknowledged_late_label_counts_it(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    """Two labels 20 days late wait for the fold once their request says ``joined: 2``; the
    next reading and history of the model count both and leave nothing out."""
    now = datetime.now(UTC)
    rows = predictions(now, n=2, first_day=20)
    send(client, auth, rows, now)
    assert queued(db) == 2
    first = datetime.fromisoformat(rows[0]["ts"].replace("Z", "+00:00"))
    day = f"start={iso(first - timedelta(hours=1))}&end={iso(first + timedelta(hours=3))}"
    url = f"/v1/models/{MODEL}/calibration?{day.replace(':', '%3A')}"
    read = ok(client.get(url, headers=auth.headers()))
    assert (read["n_predictions"], read["n_labeled"], read["labels_unfolded"]) == (2, 2, 0)
    assert read["last_fold_at"] is not None
    assert queued(db) == 0
    history_url = f"/v1/models/{MODEL}/history?{day.replace(':', '%3A')}&step=1h"
    points = ok(client.get(history_url, headers=auth.headers()))["points"]
    assert sum(p["n_labeled"] for p in points) == 2
    assert {p["labels_unfolded"] for p in points} == {0}
    assert bucket_sums(db) == rebuilt(db)


@pytest.mark.parametrize(
    ("path", "counted", "uncounted"),
    [
        ("/ui/models/late?{range}", "n = 2 labeled", "n = 0 labeled"),
        ("/v1/models/late/reliability.svg?{range}", "n = 2 labeled", "n = 0 labeled"),
        ("/v1/models/late/history.svg?{range}&step=1h", "1 labeled of 1 ", "0 labeled of 1 "),
    ],
)
def test_a_page_or_diagram_after_acknowledged_late_labels_counts_them(
    client: FlaskClient, auth: Auth, db: Database, path: str, counted: str, uncounted: str
) -> None:
    """The model page and its diagrams fold the model's waiting labels first, as its readings
    do: two labels 20 days late are drawn by the next page or diagram."""
    now = datetime.now(UTC)
    rows = predictions(now, n=2, first_day=20)
    send(client, auth, rows, now)
    first = datetime.fromisoformat(rows[0]["ts"].replace("Z", "+00:00"))
    range_ = f"start={iso(first - timedelta(hours=1))}&end={iso(first + timedelta(hours=3))}"
    response = client.get(
        path.format(range=range_.replace(":", "%3A")), headers=auth.headers("reader")
    )
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    assert queued(db) == 0
    body = response.get_data(as_text=True)
    assert counted in body and uncounted not in body


@pytest.mark.parametrize("path", ["calibration", "history"])
def test_more_labels_waiting_than_a_read_folds_are_stated_and_consistent_counts_them(
    client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """One label more than ``READ_FOLD_LIMIT`` waits: a read leaves the queue as it is and
    states every waiting label; ``consistent=true`` counts them all."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=3)
    monkeypatch.setattr(fold, "READ_FOLD_LIMIT", N - 1)
    range_ = f"start={iso(now - timedelta(days=45))}&end={iso(now)}".replace(":", "%3A")
    url = f"/v1/models/{MODEL}/{path}?{range_}" + ("&step=24h" if path == "history" else "")

    def labeled(reply: dict[str, Any]) -> tuple[int, set[int]]:
        if path == "calibration":
            return reply["n_labeled"], {reply["labels_unfolded"]}
        points = reply["points"]
        return sum(p["n_labeled"] for p in points), {p["labels_unfolded"] for p in points}

    assert labeled(ok(client.get(url, headers=auth.headers()))) == (0, {N})
    assert queued(db) == N
    assert labeled(ok(client.get(f"{url}&consistent=true", headers=auth.headers()))) == (N, {0})
    assert queued(db) == 0


def test_a_read_folds_up_to_its_limit_exactly(
    client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With exactly ``READ_FOLD_LIMIT`` labels waiting a read counts them all."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=4)
    monkeypatch.setattr(fold, "READ_FOLD_LIMIT", N)
    got = window(client, auth, now)
    assert (got["n_labeled"], got["labels_unfolded"]) == (N, 0)
    assert queued(db) == 0
    assert bucket_sums(db) == rebuilt(db)


def test_the_refresh_folds_waiting_labels_and_the_metrics_say_so(
    client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    monkeypatch.setattr(fold, "READ_FOLD_LIMIT", N - 1)
    send(client, auth, predictions(now), now)
    assert queued(db) == N
    scrape = client.get("/metrics").get_data(as_text=True)
    assert f'calmon_labels_unfolded{{model="{MODEL}"}} {N}.0' in scrape
    lag = [ln for ln in scrape.splitlines() if ln.startswith("calmon_label_fold_lag_seconds{")]
    assert len(lag) == 1 and float(lag[0].split()[-1]) >= 0.0
    assert window(client, auth, now)["n_labeled"] == 0

    refresh_all(db, load_settings({"database_url": "unused"}))
    after = window(client, auth, now)
    assert (after["n_labeled"], after["labels_unfolded"]) == (N, 0)
    assert after["last_fold_at"] is not None
    scrape = client.get("/metrics").get_data(as_text=True)
    assert f'calmon_labels_unfolded{{model="{MODEL}"}} 0.0' in scrape
    assert f'calmon_label_fold_lag_seconds{{model="{MODEL}"}} 0.0' in scrape


def test_the_refresher_folds_between_its_cycles(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its cycles doing nothing, the refresher thread still empties the queue: it folds
    at the steps between cycles."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=2)
    monkeypatch.setattr(refresher_module, "refresh_all", lambda *_a, **_k: None)
    settings = dataclasses.replace(app.config["CALMON_SETTINGS"], refresh_seconds=3.0)
    refresher = Refresher(db, settings)
    refresher.start()
    try:
        left = queued_after(db, seconds=30)
    finally:
        refresher.stop()
    assert left == 0
    assert window(client, auth, now)["n_labeled"] == N


@pytest.mark.slow
def test_calmon_refresh_loop_folds_waiting_labels(
    client: FlaskClient, auth: Auth, db: Database, database_url: str
) -> None:
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=2)
    env = {**os.environ, "CALMON_DATABASE_URL": database_url, "CALMON_REFRESH_SECONDS": "0.6"}
    calmon = Path(sys.executable).parent / "calmon"
    loop = subprocess.Popen(
        [str(calmon), "refresh", "--loop"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        left = queued_after(db, seconds=60)
    finally:
        loop.terminate()
        loop.wait(30)
    assert left == 0
    assert window(client, auth, now)["n_labeled"] == N


@pytest.mark.parametrize(("counted_at", "waiting"), [(2, 0), (3, 2)])
def test_recent_labels_and_labels_sharing_a_bucket_are_counted_by_their_request(
    client: FlaskClient,
    auth: Auth,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    counted_at: int,
    waiting: int,
) -> None:
    """Ten labels of the last day and two late ones in one bucket: all counted by the request
    while two labels in a bucket are enough (``COUNTED_AT``); the late pair waits when three
    are needed."""
    monkeypatch.setattr(label_join, "COUNTED_AT", counted_at)
    monkeypatch.setattr(fold, "READ_FOLD_LIMIT", 0)
    now = datetime.now(UTC)
    recent = [
        {**r, "id": f"r{i}", "ts": iso(now - timedelta(hours=i + 1))}
        for i, r in enumerate(predictions(now, n=10))
    ]
    old = datetime.fromisoformat(predictions(now, n=1)[0]["ts"].replace("Z", "+00:00"))
    pair = [
        {**r, "id": f"s{i}", "ts": iso(old + timedelta(seconds=i)), "cohort": {"region": "eu"}}
        for i, r in enumerate(predictions(now, n=2))
    ]
    send(client, auth, recent + pair, now)
    assert queued(db) == waiting
    got = window(client, auth, now)
    assert (got["n_labeled"], got["labels_unfolded"]) == (12 - waiting, waiting)


def _raise_after(target: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        target(*args, **kwargs)
        raise RuntimeError("killed")

    return wrapped


@pytest.mark.parametrize("step", ["claim", "apply_deltas", "mark_folded"])
def test_a_fold_killed_midway_and_run_again_counts_every_label_once(
    client: FlaskClient,
    auth: Auth,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """The fold dies after one of its statements, before its commit; run again, it leaves the
    buckets exactly as a rebuild from the stored rows makes them."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=6)
    monkeypatch.setattr(fold, "FOLD_CHUNK", 25)
    owner = fold if step == "apply_deltas" else fold_store
    real = getattr(owner, step)
    monkeypatch.setattr(owner, step, _raise_after(real))
    with db.session() as session, pytest.raises(RuntimeError, match="killed"):
        fold.fold_model(session, MODEL, datetime.now(UTC))
    assert queued(db) == N
    monkeypatch.setattr(owner, step, real)
    with db.session() as session:
        assert fold.fold_model(session, MODEL, datetime.now(UTC)) == N
    assert queued(db) == 0
    folded = bucket_sums(db)
    assert sum(r[4] for r in folded if r[0] == "all" and r[1] == "1h") == N
    assert folded == rebuilt(db)


def test_two_folds_at_once_count_every_label_once(
    client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=12)
    monkeypatch.setattr(fold, "FOLD_CHUNK", 7)
    monkeypatch.setattr(fold, "BLOCK", 3)
    start = threading.Barrier(2)
    counted: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with db.session() as session:
                start.wait()
                counted.append(fold.fold_model(session, MODEL, datetime.now(UTC)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sum(counted) == N
    assert queued(db) == 0
    folded = bucket_sums(db)
    assert folded == rebuilt(db)


def test_reads_and_the_background_fold_at_once_count_every_label_once(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background fold claims its first chunk and holds it uncommitted while three reads
    start: each read waits for that chunk, folds what is left (or finds it taken), and answers
    with every label counted; the buckets end as a rebuild makes them."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=12)
    monkeypatch.setattr(fold, "FOLD_CHUNK", 7)
    real_claim = fold_store.claim
    claimed = threading.Event()

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        rows = real_claim(*args, **kwargs)
        if not kwargs.get("at_most") and len(rows) and not claimed.is_set():
            claimed.set()  # the background fold's first chunk, held for a while
            time.sleep(0.5)
        return rows

    monkeypatch.setattr(fold_store, "claim", slow_claim)
    folded: list[int] = []
    replies: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def background() -> None:
        try:
            with db.session() as session:
                folded.append(fold.fold_model(session, MODEL, datetime.now(UTC)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def read() -> None:
        try:
            assert claimed.wait(30)
            replies.append(window(app.test_client(), auth, now))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=background)] + [
        threading.Thread(target=read) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert 0 < folded[0] <= N
    assert [(r["n_labeled"], r["labels_unfolded"]) for r in replies] == [(N, 0)] * 3
    assert queued(db) == 0
    assert bucket_sums(db) == rebuilt(db)


def test_a_read_above_the_limit_answers_while_a_fold_holds_its_chunk(
    app: Flask,
    auth: Auth,
    client: FlaskClient,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
) -> None:
    """With more labels waiting than a read folds, a read answers at once, stating them, while
    the background fold holds its first chunk uncommitted: it waits for no fold."""
    if backend != "postgresql":
        pytest.skip("on SQLite every request's transaction waits for the writer")
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=12)
    monkeypatch.setattr(fold, "FOLD_CHUNK", 7)
    monkeypatch.setattr(fold, "READ_FOLD_LIMIT", N - 1)
    real_claim = fold_store.claim
    claimed, release = threading.Event(), threading.Event()

    def held_claim(*args: Any, **kwargs: Any) -> Any:
        rows = real_claim(*args, **kwargs)
        if len(rows) and not claimed.is_set():
            claimed.set()
            release.wait(30)
        return rows

    monkeypatch.setattr(fold_store, "claim", held_claim)
    folded: list[int] = []

    def background() -> None:
        with db.session() as session:
            folded.append(fold.fold_model(session, MODEL, datetime.now(UTC)))

    thread = threading.Thread(target=background)
    thread.start()
    try:
        assert claimed.wait(30)
        got = window(app.test_client(), auth, now)
        held = thread.is_alive()  # the fold still waits inside its transaction
    finally:
        release.set()
        thread.join(60)
    assert held
    assert (got["n_labeled"], got["labels_unfolded"]) == (0, N)
    assert folded == [N]
    assert window(client, auth, now)["n_labeled"] == N


def test_labels_waiting_when_their_predictions_are_pruned_count_at_the_next_fold(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    """The queue carries what the buckets need of each prediction: folded after a prune of
    every prediction, a model's buckets end as those of a twin folded before it."""
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now, requests=3)
    send(client, auth, predictions(now), now, requests=3, model="twin")
    with db.session() as session:
        assert fold.fold_model(session, "twin", datetime.now(UTC)) == N
    assert queued(db) == N
    with db.session() as session:
        report = prune(
            session,
            older_than=timedelta(days=35),
            settings=load_settings({"database_url": "unused"}),
            now=now,
            actor="tests",
        )
    assert (report.counts.predictions, report.counts.labels) == (2 * N, 0)
    assert queued(db) == N
    with db.session() as session:
        assert fold.fold_model(session, MODEL, datetime.now(UTC)) == N
    assert bucket_sums(db) == bucket_sums(db, "twin")
    got = window(client, auth, now)
    assert (got["n_predictions"], got["n_labeled"], got["labels_unfolded"]) == (N, N, 0)


def test_a_rebuild_with_labels_waiting_counts_each_once(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    now = datetime.now(UTC)
    send(client, auth, predictions(now), now)
    assert queued(db) == N
    with db.session() as session:
        assert rebuild_buckets(session, MODEL) == N
    assert queued(db) == 0
    refresh_all(db, load_settings({"database_url": "unused"}))
    got = window(client, auth, now, "&consistent=true")
    assert (got["n_predictions"], got["n_labeled"], got["labels_unfolded"]) == (N, N, 0)


def test_consistent_takes_only_true_or_false(client: FlaskClient, auth: Auth) -> None:
    ok(client.post("/v1/contracts/fit", json=fit_body(MODEL), headers=auth.headers()))
    for path in ("calibration", "history"):
        response = client.get(f"/v1/models/{MODEL}/{path}?consistent=yes", headers=auth.headers())
        assert response.status_code == 422
        assert response.get_json()["error"]["details"][0]["field"] == "consistent"


def test_the_openapi_document_declares_labels_unfolded_on_every_read(client: FlaskClient) -> None:
    schemas = ok(client.get("/v1/openapi.json"))["components"]["schemas"]
    for reply in ("Calibration", "HistoryPoint"):
        declared = schemas[reply]["properties"]["labels_unfolded"]
        assert declared["type"] == "integer" and "consistent=true" in declared["description"]
        assert "labels_unfolded" in schemas[reply]["required"]
