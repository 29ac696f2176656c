"""Run Alembic programmatically: the only way calmon's schema changes."""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from service.db.partitions import is_partition_table

REPO_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str | None = None) -> Config:
    """Alembic config for ``migrations/`` (or ``CALMON_MIGRATIONS_DIR``) targeting the URL."""
    location = os.environ.get("CALMON_MIGRATIONS_DIR", str(REPO_ROOT / "migrations"))
    config = Config()
    config.set_main_option("script_location", location)
    if database_url:
        config.attributes["database_url"] = database_url
    return config


def include_name(name: str | None, type_: str, _parents: object) -> bool:
    """Alembic's filter: the daily partitions of ``predictions`` are not in the models."""
    return not (type_ == "table" and name is not None and is_partition_table(name))


def upgrade_to_head(database_url: str) -> None:
    """Apply every pending migration."""
    command.upgrade(alembic_config(database_url), "head")


def head_revisions() -> tuple[str, ...]:
    """The heads of the migration graph (one, when the history is linear)."""
    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revisions(engine: Engine) -> tuple[str, ...]:
    """The revisions the database says it is at (empty for an unmigrated database)."""
    with engine.connect() as connection:
        return tuple(MigrationContext.configure(connection).get_current_heads())


def schema_is_current(engine: Engine) -> bool:
    """True when the database is at the single head of the migration graph."""
    return set(current_revisions(engine)) == set(head_revisions())
