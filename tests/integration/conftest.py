"""Fixtures for API and storage tests on a real database built by the migrations.

``CALMON_TEST_BACKEND`` picks the backend: ``sqlite`` (a temporary file) or ``postgresql`` (a
fresh database created next to ``CALMON_TEST_DATABASE_URL`` and dropped afterwards).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from service import create_app
from service.auth.tokens import Role
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.db.models import Base
from tests.integration.browser import Browser, page_browser

ADMIN_TOKEN = "calmon_test-bootstrap-admin-token"
BACKEND = os.environ.get("CALMON_TEST_BACKEND", "sqlite")
#: For a test of what stands in front of the database (a proxy, the client, an install), whose
#: outcome does not depend on the backend: it runs in the SQLite stage only.
front_of_the_database = pytest.mark.skipif(
    BACKEND != "sqlite", reason="not about the database: run in the SQLite stage"
)


def _postgres_database(base_url: str) -> Iterator[str]:
    name = f"calmon_test_{uuid.uuid4().hex[:10]}"
    url = make_url(base_url).set(drivername="postgresql+psycopg")
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def backend() -> str:
    return BACKEND


@pytest.fixture(scope="session")
def empty_database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database URL with nothing in it (not even the schema)."""
    if BACKEND == "postgresql":
        base = os.environ.get("CALMON_TEST_DATABASE_URL")
        if not base:
            pytest.exit("CALMON_TEST_BACKEND=postgresql needs CALMON_TEST_DATABASE_URL", 2)
        yield from _postgres_database(base)
    else:
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'calmon.db'}"


@contextmanager
def fresh_database(tmp_path: Path, name: str = "fresh.db") -> Iterator[str]:
    """A new, empty database of the backend under test (a PostgreSQL one is dropped after)."""
    if BACKEND == "postgresql":
        yield from _postgres_database(os.environ["CALMON_TEST_DATABASE_URL"])
    else:
        yield f"sqlite:///{tmp_path / name}"


@pytest.fixture
def fresh_empty_url(tmp_path: Path) -> Iterator[str]:
    """A database of this test's own with nothing in it (for migrations run step by step)."""
    with fresh_database(tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def database_url(empty_database_url: str) -> str:
    """The test database, migrated to head once per session."""
    upgrade_to_head(empty_database_url)
    return empty_database_url


def wipe(db: Database) -> None:
    """Empty every table of the test database."""
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with db.engine.begin() as connection:
        if db.backend == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                connection.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def app(database_url: str, tmp_path: Path) -> Iterator[Flask]:
    """A fresh app on the migrated test database, emptied after the test."""
    application = create_app({"database_url": database_url, "admin_token": ADMIN_TOKEN})
    application.config["TESTING"] = True
    db: Database = application.extensions["calmon.database"]
    try:
        yield application
    finally:
        wipe(db)
        db.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def db(app: Flask) -> Database:
    return app.extensions["calmon.database"]  # type: ignore[no-any-return]


@pytest.fixture
def db_session(db: Database) -> Iterator[Session]:
    with db.session() as session:
        yield session


@dataclass
class Auth:
    """Authorization headers per role; tokens are created through the real use case."""

    db: Database

    def __post_init__(self) -> None:
        self._tokens: dict[Role, str] = {}

    def token(self, role: Role | str) -> str:
        from service.auth.service import create_token

        role = Role(role)
        if role is Role.ADMIN:
            return ADMIN_TOKEN
        if role not in self._tokens:
            with self.db.session() as session:
                self._tokens[role] = create_token(
                    session, role=role, name=f"test-{role.value}", actor="tests"
                )
        return self._tokens[role]

    def headers(self, role: Role | str = Role.ADMIN) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role)}"}


@pytest.fixture
def auth(db: Database) -> Auth:
    return Auth(db)


def assert_envelope(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert an error reply is the envelope with ``status`` (and ``code``); return its error."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}
    assert {"code", "message", "details"} <= set(body["error"])
    assert "Traceback" not in response.get_data(as_text=True)
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


@pytest.fixture
def browser() -> Iterator[Browser]:
    """A headless Chromium page, 1280 x 1800, that records CSP violations."""
    with page_browser() as chrome:
        yield chrome
