"""A database lost in the middle of a request, or taking no writes: the 503 envelope with
Retry-After, nothing half-written, and readiness that says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

from service import create_app
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from tests.integration.conftest import ADMIN_TOKEN, BACKEND, Auth, assert_envelope, fresh_database
from tests.integration.factories import fit_body
from tests.integration.test_stream import minutes_ago

HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _predictions(n: int) -> dict[str, Any]:
    rows = [
        {"id": f"p{i}", "ts": minutes_ago(3), "cohort": {"region": "emea"}, "logits": [1, 0, 0]}
        for i in range(n)
    ]
    return {"model": "lost", "predictions": rows}


def _labels(n: int) -> dict[str, Any]:
    return {
        "model": "lost",
        "labels": [{"id": f"p{i}", "label": 0, "ts": minutes_ago(1)} for i in range(n)],
    }


@contextmanager
def _terminated_after(app: Flask, database_url: str, marker: str) -> Iterator[list[int]]:
    """Terminate the request's PostgreSQL backend right after it runs a statement holding
    ``marker`` (the raw psycopg COPY or fetch that follows then finds the connection gone);
    yields the pids terminated."""
    engine = app.extensions["calmon.database"].engine
    other = Database(database_url)
    killed: list[int] = []

    def terminate(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if marker in statement and not killed:
            pid = connection.connection.dbapi_connection.info.backend_pid
            with other.engine.begin() as admin:
                admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            killed.append(pid)

    event.listen(engine, "after_cursor_execute", terminate)
    try:
        yield killed
    finally:
        event.remove(engine, "after_cursor_execute", terminate)
        other.dispose()


@pytest.mark.skipif(BACKEND != "postgresql", reason="the binary COPY paths are PostgreSQL's")
@pytest.mark.parametrize(
    ("route", "marker"),
    [
        ("/v1/predictions", "SAVEPOINT"),
        ("/v1/predictions", "CREATE TEMP TABLE IF NOT EXISTS stage_bucket_deltas"),
        ("/v1/labels", "CREATE TEMP TABLE IF NOT EXISTS stage_labels"),
        ("/v1/labels", "CREATE TEMP TABLE IF NOT EXISTS stage_bucket_deltas"),
    ],
)
def test_a_backend_terminated_mid_batch_is_a_503_and_writes_nothing(
    app: Flask, client: FlaskClient, auth: Auth, database_url: str, route: str, marker: str
) -> None:
    assert (
        client.post("/v1/contracts/fit", json=fit_body("lost"), headers=HEADERS).status_code == 201
    )
    if route == "/v1/labels":
        assert (
            client.post("/v1/predictions", json=_predictions(40), headers=HEADERS).status_code
            == 200
        )
    body = _predictions(40) if route == "/v1/predictions" else _labels(40)
    with _terminated_after(app, database_url, marker) as killed:
        response = client.post(route, json=body, headers=HEADERS)
    assert killed, f"no statement held {marker!r}"
    assert_envelope(response, 503, "database_unavailable")
    assert response.headers["Retry-After"] == "5"
    reading = client.get("/v1/models/lost/calibration?window=1h", headers=HEADERS).get_json()
    if route == "/v1/predictions":
        assert reading["n_predictions"] == 0
        retried = client.post(route, json=body, headers=HEADERS).get_json()
        assert retried["accepted"] == 40
    else:
        assert reading["n_predictions"] == 40 and reading["n_labeled"] == 0
        retried = client.post(route, json=body, headers=HEADERS).get_json()
        assert retried["joined"] == 40


@contextmanager
def _read_only_app(tmp_path: Path) -> Iterator[tuple[Flask, Any]]:
    """An app on a migrated database of its own that takes no writes (PostgreSQL: read-only
    transactions by default; SQLite: the file opened read-only); yields the app and a function
    that makes the database writable again (for a new app)."""
    with fresh_database(tmp_path, "read-only.db") as url:
        upgrade_to_head(url)
        if BACKEND == "postgresql":
            name = make_url(url).database
            admin = create_engine(
                make_url(url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
            )
            with admin.connect() as connection:
                connection.execute(
                    text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                )
            read_only_url = url

            def writable() -> str:
                with admin.connect() as connection:
                    connection.execute(
                        text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
                    )
                admin.dispose()
                return url

        else:
            path = make_url(url).database
            read_only_url = f"sqlite:///file:{path}?mode=ro&uri=true"

            def writable() -> str:
                return url

        app = create_app({"database_url": read_only_url, "admin_token": ADMIN_TOKEN})
        try:
            yield app, writable
        finally:
            app.extensions["calmon.database"].dispose()


def test_readyz_is_not_ready_while_the_database_takes_no_writes(tmp_path: Path) -> None:
    with _read_only_app(tmp_path) as (app, writable):
        client = app.test_client()
        error = assert_envelope(client.get("/readyz"), 503, "database_read_only")
        assert "read-only" in error["message"] or "no writes" in error["message"]
        assert error["details"][0]["field"] == "transaction"
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/contracts", headers=HEADERS).status_code == 200
        response = client.post("/v1/contracts/fit", json=fit_body("ro"), headers=HEADERS)
        assert_envelope(response, 503, "database_unavailable")
        assert response.headers["Retry-After"]
        url = writable()
        again = create_app({"database_url": url, "admin_token": ADMIN_TOKEN})
        try:
            assert again.test_client().get("/readyz").status_code == 200
            assert (
                again.test_client().get("/v1/contracts", headers=HEADERS).get_json()["contracts"]
                == []
            )
        finally:
            again.extensions["calmon.database"].dispose()
    assert not os.path.exists("file:"), "a file: URI must not make a directory"


def _in_own_mount_namespace() -> list[str]:
    """The command prefix that runs a process as root of a mount namespace of its own, or []
    when this machine allows none (no ``unshare``, or user namespaces disabled)."""
    prefix = ["unshare", "--user", "--map-root-user", "--mount"]
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return prefix if probe.returncode == 0 else []


@pytest.mark.skipif(BACKEND != "sqlite", reason="a PostgreSQL server's disk is the server's")
def test_readyz_is_not_ready_while_the_sqlite_disk_is_full(tmp_path: Path) -> None:
    prefix = _in_own_mount_namespace()
    if not prefix:
        pytest.skip("needs a mount namespace (unshare with user namespaces)")
    mount = tmp_path / "small"
    mount.mkdir()
    run = subprocess.run(
        [*prefix, sys.executable, "-m", "tests.support.full_disk", str(mount)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stderr
    replies = json.loads(run.stdout.strip().splitlines()[-1])
    assert replies["before"]["status"] == 200, replies
    assert replies["filled_bytes"] > 0
    assert replies["full"]["status"] == 503, replies
    error = replies["full"]["body"]["error"]
    assert error["code"] == "database_disk_full"
    assert error["details"][0]["field"] == "write_probe"
    assert "space" in error["message"]
    assert replies["after"] == {"status": 200, "body": {"status": "ready", "database": "sqlite"}}
