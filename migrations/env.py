"""Alembic environment: the URL comes from calmon's settings, the target from its models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.config import load_settings
from service.db.database import make_engine
from service.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.attributes.get("database_url") or load_settings().database_url


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        literal_binds=connection is None,
    )


def run_migrations_offline() -> None:
    """Emit the SQL script instead of running it (``alembic upgrade head --sql``)."""
    _configure(url=_url())
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live connection: a caller's (tests, ``calmon migrate``) or a new engine."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
