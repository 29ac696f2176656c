"""Run Alembic programmatically: the only way calmon's schema changes."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

#: The repository's top-level ``migrations/``, installed as this package (pyproject.toml maps it).
MIGRATIONS_PACKAGE = "service.migrations"


def script_location() -> str:
    """The directory of the Alembic environment and its versions, wherever calmon is installed
    (a wheel, an editable install of a checkout, the image)."""
    return str(resources.files(MIGRATIONS_PACKAGE))


def alembic_config(database_url: str | None = None) -> Config:
    """Alembic config for the installed migrations, targeting ``database_url``."""
    config = Config()
    config.set_main_option("script_location", script_location())
    if database_url:
        config.attributes["database_url"] = database_url
    return config


def upgrade_to_head(database_url: str) -> list[str]:
    """Apply every pending migration; what was applied, oldest first, each as its revision and
    the first line of its message (``0020 request_keys: ...``)."""
    from service.db.database import make_engine

    engine = make_engine(database_url)
    try:
        before = current_revisions(engine)
        command.upgrade(alembic_config(database_url), "head")
        after = current_revisions(engine)
    finally:
        engine.dispose()
    script = ScriptDirectory.from_config(alembic_config())
    had = {r.revision for r in script.iterate_revisions(before, "base")} if before else set()
    applied = [r for r in script.iterate_revisions(after, "base") if r.revision not in had]
    return [_described(r.revision, r.doc) for r in reversed(applied)]


def _described(revision: str, doc: str | None) -> str:
    lines = (doc or "").strip().splitlines()
    return f"{revision} {lines[0]}" if lines else revision


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
