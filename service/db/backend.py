"""The generic SQL that differs between PostgreSQL and SQLite, behind one small interface.

Every module that needs a backend-specific statement of no one capability asks
``backend_of(session)`` for the ``Backend`` (``service.db.dialect``) of its connection and calls
one of its methods; the two implementations are ``service.db.postgresql`` and
``service.db.sqlite``. A capability's own backend-specific queries live in its ``sql/`` package.
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from service.db.dialect import Backend
from service.db.postgresql import POSTGRESQL
from service.db.sqlite import SQLITE


def backend_of(bind: Session | Connection) -> Backend:
    """The ``Backend`` of a session's or a connection's database."""
    engine = bind.get_bind() if isinstance(bind, Session) else bind
    return POSTGRESQL if engine.dialect.name == "postgresql" else SQLITE
