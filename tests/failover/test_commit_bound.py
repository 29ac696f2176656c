"""A commit that waits for a synchronous standby that never answers (a primary cut off from
it): calmon answers 503 after ``CALMON_COMMIT_SECONDS`` instead of holding the request, the
retry of an audited write returns what the first attempt kept, and no backend of calmon's is
left waiting for the standby (which would keep the primary from shutting down)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask

from service import create_app
from service.db.migrate import upgrade_to_head
from tests.integration.conftest import ADMIN_TOKEN, assert_envelope
from tests.integration.factories import fit_body
from tests.integration.test_stream import minutes_ago
from tests.support import formation as formations
from tests.support.postgres import standalone

pytestmark = pytest.mark.skipif(
    formations.available() is not None, reason=str(formations.available())
)
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def stalled() -> Iterator[tuple[Flask, str]]:
    """An app bounding commits at 1 s on a server whose commits wait for a standby that
    never comes (the schema migrated before the standby is required)."""
    with standalone() as url:
        upgrade_to_head(url)
        with psycopg.connect(url.replace("postgresql://", "postgres://"), autocommit=True) as c:
            c.execute("ALTER SYSTEM SET synchronous_standby_names = 'never_connects'")
            c.execute("SELECT pg_reload_conf()")
        app = create_app(
            {
                "database_url": url,
                "admin_token": ADMIN_TOKEN,
                "commit_seconds": 1,
                "log_level": "WARNING",
            }
        )
        try:
            yield app, url
        finally:
            app.extensions["calmon.database"].dispose()


def _waiting_for_the_standby(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        ).fetchone()
        return int(row[0]) if row else 0


def _standby_answers(url: str) -> None:
    """No standby required any more (as when the failover's new primary runs)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")


def test_nothing_is_acknowledged_before_the_standby_has_it(stalled: tuple[Flask, str]) -> None:
    """A commit past the bound is 503; so is a retry that finds its write already kept on the
    primary (a replayed key, a batch of stored ids): its reply would report what the standby
    does not have. No backend is left waiting; once commits are confirmed, the retries are
    answered with what the first attempts kept, stored once."""
    app, url = stalled
    client = app.test_client()
    keyed = {**HEADERS, "Idempotency-Key": "fit-while-cut-off"}
    first = client.post("/v1/contracts/fit", json=fit_body("cut"), headers=keyed)
    assert_envelope(first, 503, "database_unavailable")
    assert first.headers["Retry-After"]
    replayed = client.post("/v1/contracts/fit", json=fit_body("cut"), headers=keyed)
    assert_envelope(replayed, 503, "database_unavailable")

    predictions = {
        "model": "cut",
        "predictions": [
            {"id": f"p{i}", "ts": minutes_ago(2), "logits": [1, 0, 0]} for i in range(20)
        ],
    }
    assert_envelope(client.post("/v1/predictions", json=predictions, headers=HEADERS), 503)
    assert_envelope(client.post("/v1/predictions", json=predictions, headers=HEADERS), 503)
    deadline = time.monotonic() + 20
    while _waiting_for_the_standby(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _waiting_for_the_standby(url) == 0

    _standby_answers(url)
    again = client.post("/v1/contracts/fit", json=fit_body("cut"), headers=keyed)
    assert again.status_code == 201, again.get_json()
    contracts = client.get("/v1/contracts?model=cut", headers=HEADERS).get_json()["contracts"]
    assert [c["id"] for c in contracts] == [again.get_json()["id"]]
    stored = client.post("/v1/predictions", json=predictions, headers=HEADERS).get_json()
    assert (stored["accepted"], stored["duplicates"]) == (0, 20)
