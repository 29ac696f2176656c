"""Alembic is the only schema path: one head, and the models match the migrations."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from service.db.database import make_engine
from service.db.migrate import current_revisions, head_revisions
from service.db.models import Base


def test_single_head() -> None:
    assert len(head_revisions()) == 1


def test_database_is_at_head(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert current_revisions(engine) == head_revisions()
    finally:
        engine.dispose()


def test_models_and_migrations_agree(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []
