"""Connecting to a failover pair: the multi-host URL in both forms, a connection that found
itself on a read-only node discarded, and readiness saying when an acknowledged write might not
be on a standby."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from service import create_app
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from tests.integration.conftest import ADMIN_TOKEN, BACKEND, assert_envelope, fresh_database
from tests.integration.factories import fit_body

pytestmark = pytest.mark.skipif(BACKEND != "postgresql", reason="failover is PostgreSQL's")
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _closed_port() -> int:
    """A port nothing listens on (a lost node)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def migrated(tmp_path: Path) -> Iterator[str]:
    with fresh_database(tmp_path, "failover.db") as url:
        upgrade_to_head(url)
        yield url


def _multi_host_urls(url: str) -> tuple[str, str]:
    """``url``'s server behind a lost first host, in SQLAlchemy's form and in the libpq form
    ``pg_autoctl show uri`` prints."""
    parsed = make_url(url)
    lost = f"127.0.0.1:{_closed_port()}"
    live = f"{parsed.host}:{parsed.port or 5432}"
    user = parsed.username or "postgres"
    sqlalchemy_form = (
        f"postgresql+psycopg://{user}@/{parsed.database}"
        f"?host={lost}&host={live}&target_session_attrs=read-write"
    )
    libpq_form = (
        f"postgres://{user}@{lost},{live}/{parsed.database}?target_session_attrs=read-write"
    )
    return sqlalchemy_form, libpq_form


@pytest.mark.parametrize("form", ["sqlalchemy", "libpq"])
def test_a_multi_host_url_reaches_the_host_that_takes_writes(migrated: str, form: str) -> None:
    url = dict(zip(("sqlalchemy", "libpq"), _multi_host_urls(migrated), strict=True))[form]
    app = create_app({"database_url": url, "admin_token": ADMIN_TOKEN})
    try:
        client = app.test_client()
        assert (
            client.post("/v1/contracts/fit", json=fit_body("pair"), headers=HEADERS).status_code
            == 201
        )
        ready = client.get("/readyz")
        assert ready.status_code == 200
        warnings = ready.get_json()["warnings"]
        assert any("no synchronous standby" in w for w in warnings), warnings
    finally:
        app.extensions["calmon.database"].dispose()


def test_a_single_server_has_no_failover_warning(migrated: str) -> None:
    app = create_app({"database_url": migrated, "admin_token": ADMIN_TOKEN})
    try:
        ready = app.test_client().get("/readyz").get_json()
        assert ready == {"status": "ready", "database": "postgresql"}
    finally:
        app.extensions["calmon.database"].dispose()


def test_a_multi_host_url_without_read_write_is_warned_about(migrated: str) -> None:
    url = _multi_host_urls(migrated)[0].replace("&target_session_attrs=read-write", "")
    database = Database(url)
    try:
        from service.db.failover import engine_durability_warnings

        warnings = engine_durability_warnings(database.engine)
        assert any("target_session_attrs" in w for w in warnings), warnings
    finally:
        database.dispose()


def test_a_connection_on_a_read_only_node_is_discarded_without_a_restart(migrated: str) -> None:
    """The pool's connections opened while the database took no writes (a standby, a node being
    promoted) are dropped at the first refused write, so writes resume once it takes them."""
    name = make_url(migrated).database
    admin = create_engine(
        make_url(migrated).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
    )
    app = create_app({"database_url": migrated, "admin_token": ADMIN_TOKEN})
    try:
        client = app.test_client()
        with admin.connect() as connection:
            connection.execute(
                text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            )
        app.extensions["calmon.database"].engine.dispose()
        refused = client.post("/v1/contracts/fit", json=fit_body("ro"), headers=HEADERS)
        assert_envelope(refused, 503, "database_unavailable")
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        accepted = client.post("/v1/contracts/fit", json=fit_body("ro"), headers=HEADERS)
        assert accepted.status_code == 201, accepted.get_json()
    finally:
        app.extensions["calmon.database"].dispose()
        admin.dispose()
