"""Leases: a named right to do periodic work, held until it expires."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.models import RefreshLease, table_of


def try_acquire(session: Session, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
    """Take or renew the lease ``name`` for ``holder`` until ``now + ttl`` (the caller commits).

    Succeeds when nobody holds it, when ``holder`` already does, or when the holder's time ran
    out. Atomic on both backends: one conditional UPDATE, or an INSERT for a first-ever lease.
    """
    until = now + ttl
    taken = session.scalar(
        update(RefreshLease)
        .where(
            RefreshLease.name == name,
            or_(RefreshLease.expires_at < now, RefreshLease.holder == holder),
        )
        .values(holder=holder, expires_at=until)
        .returning(RefreshLease.name)
    )
    if taken is None:
        insert = backend_of(session).insert(table_of(RefreshLease))
        taken = session.scalar(
            insert.values(name=name, holder=holder, expires_at=until)
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(table_of(RefreshLease).c.name)
        )
    return taken is not None
