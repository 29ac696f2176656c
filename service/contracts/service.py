"""Use cases of contracts: register, fit, find, verify, retire, the active and current one.

Each use case that writes owns its transaction and commits once."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from service.audit import request_keys
from service.audit import store as audit
from service.audit.chain import retirement_document, retirement_sha256
from service.audit.events import (
    CREATION_EVENTS,
    ContractCreated,
    ContractFitted,
    ContractRetired,
)
from service.audit.records import contract_problems
from service.audit.request_keys import RequestKey
from service.calibration.calibrators import bound_warning
from service.calibration.fit_warnings import FitEvidence, FitWarning, fit_warnings
from service.common.clock import utcnow
from service.common.errors import Conflict, NotFound
from service.contracts import store as contracts_store
from service.contracts.fitting import FitRequest, fit_contract_spec
from service.contracts.model import (
    BaselineSource,
    Contract,
    ContractSpec,
    content_sha256,
    hashed_document,
)
from service.contracts.store import claim_next_version, insert_contract


def register_contract(
    session: Session,
    spec: ContractSpec,
    *,
    actor: str,
    event: str = "contract_registered",
    request_key: RequestKey | None = None,
) -> Contract:
    """Store ``spec`` as the model's next version with its content hash; audit it; commit.

    The event's type records where the baseline came from: ``contract_fitted`` when calmon
    measured it (``fit_contract``), ``contract_registered`` when the registrant supplied it.
    A request whose ``request_key`` was stored before gets that contract back, unchanged.
    """
    prior = _prior_contract(session, request_key)
    if prior is not None:
        return prior
    now = utcnow()
    version = claim_next_version(session, spec.model, now)
    contract_id = str(uuid.uuid4())
    digest = content_sha256(hashed_document(contract_id, version, spec, now, actor))
    contract = Contract(
        id=contract_id,
        version=version,
        spec=spec,
        created_at=now,
        created_by=actor,
        content_sha256=digest,
    )
    insert_contract(session, contract)
    created = CREATION_EVENTS[event]
    audit.append_event(
        session,
        created(
            version=version,
            content_sha256=digest,
            baseline_source="measured" if created is ContractFitted else "supplied",
        ),
        actor=actor,
        now=now,
        model=spec.model,
        contract_id=contract_id,
    )
    request_keys.remember(session, request_key, contract_id, now)
    session.commit()
    return contract


def fit_contract(
    session: Session,
    request: FitRequest,
    *,
    actor: str,
    request_key: RequestKey | None = None,
) -> Contract:
    """Fit the calibrator on the fit set, measure the baseline on both sets, and register it
    (a request whose ``request_key`` was stored before gets that contract, without a fit)."""
    prior = _prior_contract(session, request_key)
    if prior is not None:
        return prior
    return register_contract(
        session,
        fit_contract_spec(request),
        actor=actor,
        event="contract_fitted",
        request_key=request_key,
    )


def _prior_contract(session: Session, request_key: RequestKey | None) -> Contract | None:
    """The contract the request named by ``request_key`` made or retired before, or None.
    A replay commits too: on PostgreSQL the reply then waits, as the first one would have, until
    what it reports is on the standby (``service.db.failover``)."""
    prior = request_keys.prior_result(session, request_key)
    if prior is None:
        return None
    contract = find_contract(session, prior)
    session.commit()
    return contract


def contract_warnings(contract: Contract, min_rows: int) -> list[FitWarning]:
    """What a registrant should know before relying on the contract (empty when nothing): the
    fit warnings of its calibrator and baseline (``calibration.fit_warnings``; ``min_rows`` the
    gate's default ``min_eval_samples``); a temperature stopped on the range the fit searches
    also fails the gate's ``calibrator_bound``."""
    baseline = contract.spec.baseline
    fit, held = baseline.reading("fit"), baseline.reading("eval")
    evidence = FitEvidence(
        fit_rows=fit.n,
        eval_rows=held.n,
        fit_nll=(baseline.reading("fit", "uncalibrated").nll, fit.nll),
        eval_nll=(baseline.reading("eval", "uncalibrated").nll, held.nll),
        eval_difference=contract.baseline_nll_difference("eval"),
    )
    warnings = fit_warnings(contract.calibrator, evidence, min_rows)
    gate_bound = bound_warning(contract.calibrator)
    suffix = " (the gate's calibrator_bound check fails it)"
    return [
        FitWarning(w.code, w.message + suffix) if w.message == gate_bound else w for w in warnings
    ]


def baseline_source(session: Session, contract: Contract) -> BaselineSource:
    """``measured`` if the audit chain records calmon fitting the contract, else ``supplied``
    (registered with its baseline, or no creation event to vouch for it)."""
    kind = audit.creation_event_type(session, contract.model, contract.id)
    return "measured" if kind == "contract_fitted" else "supplied"


def find_contract(session: Session, contract_id: str) -> Contract:
    contract = contracts_store.get_contract(session, contract_id)
    if contract is None:
        raise NotFound(f"no contract with id {contract_id!r}")
    return contract


@dataclass(frozen=True)
class CreationEvent:
    """The audit event that recorded a contract's creation: its ``seq``, its type
    (``contract_registered`` or ``contract_fitted``) and the content hash it records."""

    seq: int
    type: str
    content_sha256: str


@dataclass(frozen=True)
class Verification:
    """A contract's check against its creation event: ``valid`` when ``problems`` is empty;
    the stored hash, the hash of its fields recomputed (None when they cannot be read), the
    first creation event (None when there is none) and each difference
    (``service.audit.records``)."""

    id: str
    valid: bool
    content_sha256: str
    recomputed_sha256: str | None
    event: CreationEvent | None
    problems: list[dict[str, Any]]


def verify_contract(session: Session, contract_id: str) -> Verification:
    """Recompute the content hash from the stored record; compare it with the stored
    ``content_sha256`` and with the creation event (``contract_registered`` or
    ``contract_fitted``): its hash, version, model, time and actor. ``problems`` lists each
    difference (``service.audit.records``); whether the event itself is intact on the chain is
    what the audit log's verification checks."""
    stored = contracts_store.stored_contract(session, contract_id)
    if stored is None:
        raise NotFound(f"no contract with id {contract_id!r}")
    events = audit.creation_events(session, contract_id)
    problems = contract_problems(events, stored)
    first = None
    if events:
        recorded = ContractCreated.read(events[0].details).content_sha256
        first = CreationEvent(events[0].seq, events[0].type, recorded)
    return Verification(
        id=stored.id,
        valid=not problems,
        content_sha256=stored.content_sha256,
        recomputed_sha256=stored.recomputed_sha256,
        event=first,
        problems=problems,
    )


#: Every stored contract with its recomputed hash: the contracts the audit log's verification
#: checks against their events (``service.audit.service.verify_audit``).
stored_contracts = contracts_store.stored_contracts


def retire_contract(
    session: Session,
    contract_id: str,
    *,
    reason: str,
    actor: str,
    request_key: RequestKey | None = None,
) -> Contract:
    """Record the retirement event (the contract itself never changes); 409 if already retired,
    unless by this very request (``request_key``), which gets the retired contract back."""
    prior = _prior_contract(session, request_key)
    if prior is not None:
        return prior
    contract = find_contract(session, contract_id)
    if contract.retirement is not None:
        raise Conflict(
            f"contract {contract_id} was already retired at "
            f"{contract.retirement.retired_at.isoformat()}"
        )
    now = utcnow()
    row = contracts_store.insert_retirement(
        session, contract_id, reason=reason, retired_by=actor, now=now
    )
    retirement = retirement_document(row.contract_id, row.reason, row.retired_at, row.retired_by)
    audit.append_event(
        session,
        ContractRetired(
            version=contract.version,
            reason=reason,
            retirement=retirement,
            retirement_sha256=retirement_sha256(retirement),
        ),
        actor=actor,
        now=now,
        model=contract.model,
        contract_id=contract_id,
    )
    request_keys.remember(session, request_key, contract_id, now)
    session.commit()
    return find_contract(session, contract_id)


def current_contract(session: Session, model: str, now: datetime) -> Contract:
    """The contract a model is measured against now: its active one, else its latest version
    (all of them retired); 404 for a model without contracts."""
    contract = contracts_store.active_contract_at(session, model, now)
    if contract is None:
        contract = contracts_store.latest_contract(session, model)
    if contract is None:
        raise NotFound(f"unknown model {model!r}")
    return contract


def active_contract(session: Session, model: str, at: datetime) -> Contract:
    """The model's active contract at ``at``; 404 for an unknown model or none active."""
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    contract = contracts_store.active_contract_at(session, model, at)
    if contract is None:
        raise NotFound(f"model {model!r} has no active contract at {at.isoformat()}")
    return contract


#: Reads that need nothing but their query are the store's functions themselves.
list_contracts = contracts_store.list_contracts
unreadable_among = contracts_store.unreadable_among
model_names = contracts_store.model_names
