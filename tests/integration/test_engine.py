"""What ``make_engine`` sets on every connection it opens."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from service.db.database import Database
from tests.integration.conftest import BACKEND


@pytest.mark.skipif(BACKEND != "postgresql", reason="JIT compilation is PostgreSQL's")
def test_postgresql_connections_run_without_jit(database_url: str) -> None:
    database = Database(database_url, pool_size=1, max_overflow=0)
    try:
        for _ in range(2):  # a fresh connection, then the same one back from the pool
            with database.session() as session:
                assert session.execute(text("SHOW jit")).scalar_one() == "off"
                session.rollback()
    finally:
        database.engine.dispose()
