"""Staging tables: what a load leaves for the planner (PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from service.db.database import Database
from service.stream.sql import staging
from tests.integration.conftest import BACKEND


@pytest.mark.skipif(BACKEND != "postgresql", reason="planner statistics and collations")
def test_a_load_gathers_statistics_of_its_keys_only_and_compares_text_bytewise(
    database_url: str,
) -> None:
    database = Database(database_url)
    now = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [(f"p{i:05d}", now, '{"region":"emea"}', '["*"]', b"\0" * 80) for i in range(500)]
    try:
        with database.session() as session:
            staging.load(session, "stage_predictions", rows)
            analysed = session.scalars(
                text("SELECT attname FROM pg_stats WHERE tablename = 'stage_predictions'")
            ).all()
            collations = dict(
                session.execute(
                    text(
                        "SELECT a.attname, k.collname FROM pg_attribute a"
                        " JOIN pg_collation k ON k.oid = a.attcollation"
                        " WHERE a.attrelid = 'stage_predictions'::regclass AND a.attnum > 0"
                    )
                ).all()
            )
            staged = session.scalar(text("SELECT count(*) FROM stage_predictions"))
        assert sorted(analysed) == list(staging.STAGING_KEYS["stage_predictions"]) == ["id"]
        assert collations == {"id": "C", "cohort": "C", "slices": "C"}
        assert staged == 500
    finally:
        database.engine.dispose()


def test_every_staging_key_is_a_column_of_its_table() -> None:
    assert staging.STAGING_KEYS.keys() == staging.STAGING_TABLES.keys()
    for table, keys in staging.STAGING_KEYS.items():
        assert set(keys) <= {name for name, _, _ in staging.STAGING_TABLES[table]}, table
