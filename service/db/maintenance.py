"""Maintenance tasks that migrations leave for ``calmon migrate`` to run."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.db.models import MaintenanceTask


def pending_tasks(session: Session) -> list[str]:
    """Names of the tasks still to run, oldest first."""
    return list(
        session.scalars(select(MaintenanceTask.name).order_by(MaintenanceTask.requested_at))
    )


def finish_task(session: Session, name: str) -> None:
    """Mark ``name`` as done (in the caller's transaction)."""
    session.execute(delete(MaintenanceTask).where(MaintenanceTask.name == name))
