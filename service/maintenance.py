"""Run the maintenance tasks migrations leave behind, with the application's code."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from service.ingestion import rebuild_buckets
from service.storage import contracts as contracts_store
from service.storage.maintenance import finish_task, pending_tasks

log = logging.getLogger(__name__)

REBUILD_BUCKETS = "rebuild_buckets"


def run_pending(session: Session) -> list[str]:
    """Run every pending task, oldest first, and mark each done when it completes."""
    done = []
    for name in pending_tasks(session):
        if name == REBUILD_BUCKETS:
            for model in contracts_store.model_names(session):
                rows = rebuild_buckets(session, model)
                log.info("rebuilt buckets", extra={"model": model, "predictions": rows})
        else:
            log.warning("unknown maintenance task %s: left pending", name)
            continue
        finish_task(session, name)
        session.commit()
        done.append(name)
    return done
