"""Maintenance migrations leave behind, run with the application's code: rebuilding buckets."""

from __future__ import annotations

import logging

import numpy as np
from sqlalchemy.orm import Session

from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.db.maintenance import finish_task, pending_tasks
from service.stream import bucket_store, fold_store, prediction_store
from service.stream.bucket_store import BucketDelta, BucketKey, apply_deltas
from service.stream.bucketing import bucket_deltas, merge_deltas, parsed_slices, stored_inputs

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


#: Predictions read per page when buckets are rebuilt from the stored rows.
REBUILD_PAGE = 20_000


def rebuild_buckets(session: Session, model: str) -> int:
    """Recompute every bucket of ``model`` from its stored predictions and joined labels.

    Deletes the model's buckets and its labels queued for the fold (the stored rows count
    every joined label) in one transaction, then walks the predictions in id order (their
    primary key), one page per transaction; a rebuild cut short is started again from scratch.
    Returns the predictions counted.
    """
    bucket_store.delete_model_buckets(session, model)
    fold_store.drop_queue(session, model)
    session.commit()
    contracts: dict[str, Contract] = {}
    after, total = None, 0
    while True:
        page = prediction_store.predictions_page(session, model, after, REBUILD_PAGE)
        if not len(page):
            return total
        deltas: dict[BucketKey, BucketDelta] = {}
        contract_of = np.array(page.contract_ids, dtype=object)
        for contract_id in sorted(set(page.contract_ids)):
            if contract_id not in contracts:
                found = contracts_store.get_contract(session, contract_id)
                assert found is not None
                contracts[contract_id] = found
            rows = np.flatnonzero(contract_of == contract_id)
            merge_deltas(
                deltas,
                bucket_deltas(
                    contracts[contract_id],
                    seconds=page.seconds[rows],
                    slices=parsed_slices([page.slices[r] for r in rows]),
                    inputs=stored_inputs(contracts[contract_id], [page.inputs[r] for r in rows]),
                    labels=page.labels[rows],
                    new=True,
                ),
            )
        apply_deltas(session, model, deltas)
        session.commit()
        after, total = page.ids[-1], total + len(page)
