"""Contracts: register, fit, list, get, verify, retire, and a model's active contract."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from flask import Blueprint, Response
from werkzeug.routing import BaseConverter

from service.auth.tokens import Permission
from service.common.clock import utcnow
from service.common.declared import Declared
from service.contracts import service as contracts_service
from service.contracts.model import Contract as StoredContract
from service.contracts.replies import Contract, ContractList, FitWarningReply, Verification
from service.contracts.requests import (
    FIT,
    REGISTRATION,
    RETIREMENT,
    parse_fit_request,
    parse_registration,
    parse_retirement,
)
from service.gate.requests import DEFAULT_GATE_POLICY
from service.web.auth import current_principal, requires
from service.web.bodies import json_body
from service.web.db_session import db_session
from service.web.operations import operation
from service.web.queries import (
    NameParam,
    NoQuery,
    PageQuery,
    Query,
    TimestampParam,
    fetch_newest_first,
)
from service.web.replies import reply
from service.web.request_keys import request_key

bp = Blueprint("contracts", __name__, url_prefix="/v1")


class ContractIdConverter(BaseConverter):
    """A contract id in ``/v1/contracts/{id}``: any path segment but ``fit``, which is
    ``POST /v1/contracts/fit``'s own (so ``OPTIONS`` on it allows POST alone, not GET)."""

    regex = r"(?!fit$)[^/]+"


def links_from_contract() -> dict[str, Any]:
    """Links from a stored contract (reply of register and fit) to what takes its id or model."""
    by_id = {"path.contract_id": "$response.body#/id"}
    by_model = {"path.model": "$response.body#/model"}
    return {
        "GetContract": {"operationId": "getContract", "parameters": by_id},
        "VerifyContract": {"operationId": "verifyContract", "parameters": by_id},
        "RetireContract": {"operationId": "retireContract", "parameters": by_id},
        "ContractDiagram": {"operationId": "contractDiagram", "parameters": by_id},
        "ActiveContract": {"operationId": "activeContract", "parameters": by_model},
        "Calibration": {"operationId": "calibration", "parameters": by_model},
        "ModelDiagram": {"operationId": "modelDiagram", "parameters": by_model},
        "HistoryDiagram": {"operationId": "historyDiagram", "parameters": by_model},
        "Cohorts": {"operationId": "cohorts", "parameters": by_model},
        "Gate": {"operationId": "decideGate", "requestBody": {"contract_id": "$response.body#/id"}},
        "Predictions": {
            "operationId": "ingestPredictions",
            "requestBody": {"model": "$response.body#/model"},
        },
        "Labels": {
            "operationId": "ingestLabels",
            "requestBody": {"model": "$response.body#/model"},
        },
        "ListContracts": {
            "operationId": "listContracts",
            "parameters": {"query.model": "$response.body#/model"},
        },
    }


View = TypeVar("View", bound=Callable[..., Response])


def _creation(path: str, operation_id: str, body: Declared) -> Callable[[View], View]:
    """Declare a route that stores a contract: ``POST path`` for the ``admin`` permission, the
    request ``body``, replying 201 with the stored contract; documented as ``operation_id``."""

    def declare(view: View) -> View:
        declared = operation(
            operation_id=operation_id,
            reply=Contract,
            reply_description="the stored contract",
            status=201,
            body=body,
            query=NoQuery,
            links=links_from_contract(),
        )(view)
        return bp.post(path)(requires(Permission.ADMIN)(declared))

    return declare


def _created(store: Callable[..., StoredContract], request: object, operation_id: str) -> Response:
    """Store the contract of a parsed ``request`` through ``store`` (the caller as its actor,
    under the request's key for ``operation_id``) and reply 201 with it and what its reviewer
    should know of it."""
    contract = store(
        db_session(),
        request,
        actor=current_principal().name,
        request_key=request_key(operation_id),
    )
    warnings = contracts_service.contract_warnings(
        contract, DEFAULT_GATE_POLICY["min_eval_samples"]
    )
    created = Contract.model_validate(contract).model_copy(
        update={"warnings": [FitWarningReply(code=w.code, message=w.message) for w in warnings]}
    )
    return reply(Contract, created, 201)


@_creation("/contracts", "registerContract", REGISTRATION)
def register() -> Response:
    """Register a contract fitted elsewhere."""
    NoQuery.parse()
    spec = parse_registration(json_body())
    return _created(contracts_service.register_contract, spec, "registerContract")


@_creation("/contracts/fit", "fitContract", FIT)
def fit() -> Response:
    """Fit a calibrator on fit, measure fit and eval, store the contract.

    Fit a calibrator on the fit set, measure the baseline on both sets, register it.
    """
    NoQuery.parse()
    request = parse_fit_request(json_body())
    return _created(contracts_service.fit_contract, request, "fitContract")


class ContractsQuery(PageQuery):
    """Contracts of one model, or active at a time."""

    model: NameParam = None  # type: ignore[valid-type]
    active_at: TimestampParam = None


@bp.get("/contracts")
@requires(Permission.READ)
@operation(
    operation_id="listContracts",
    reply=ContractList,
    reply_description="a page",
    query=ContractsQuery,
)
def list_contracts() -> Response:
    """List contracts, newest first.

    Contracts newest first, optionally of one model or active at a time; paginated.
    """
    query = ContractsQuery.parse()
    page = fetch_newest_first(
        query, partial(contracts_service.list_contracts, db_session()), seq=lambda row: row[0]
    )
    return reply(
        ContractList,
        {
            "contracts": [c for _, c in page.rows if isinstance(c, StoredContract)],
            "unreadable": [c for _, c in page.rows if not isinstance(c, StoredContract)],
            "next_cursor": page.next_cursor,
        },
    )


@bp.get("/contracts/<contract_id:contract_id>")
@requires(Permission.READ)
@operation(
    operation_id="getContract",
    reply=Contract,
    reply_description="the contract",
    query=NoQuery,
)
def get_contract(contract_id: str) -> Response:
    """One contract.

    One contract with its content hash and retirement, if any.
    """
    NoQuery.parse()
    return reply(Contract, contracts_service.find_contract(db_session(), contract_id))


@bp.get("/contracts/<contract_id>/verify")
@requires(Permission.READ)
@operation(
    operation_id="verifyContract",
    reply=Verification,
    reply_description="the check",
    query=NoQuery,
)
def verify(contract_id: str) -> Response:
    """Recompute the content hash; check it against the contract's creation event.

    Recompute the content hash from the stored record; check it against the stored hash and the
    contract's creation event.
    """
    NoQuery.parse()
    return reply(Verification, contracts_service.verify_contract(db_session(), contract_id))


@bp.post("/contracts/<contract_id>/retire")
@requires(Permission.ADMIN)
@operation(
    operation_id="retireContract",
    reply=Contract,
    reply_description="the contract",
    body=RETIREMENT,
    query=NoQuery,
    errors=(409,),
)
def retire(contract_id: str) -> Response:
    """Retire a contract (an audit event).

    Retire a contract: an audit event; the contract itself never changes.
    """
    NoQuery.parse()
    reason = parse_retirement(json_body())
    contract = contracts_service.retire_contract(
        db_session(),
        contract_id,
        reason=reason,
        actor=current_principal().name,
        request_key=request_key("retireContract"),
    )
    return reply(Contract, contract)


class ActiveContractQuery(Query):
    """The time the contract is active at (default: now)."""

    at: TimestampParam = None


@bp.get("/models/<model>/contract")
@requires(Permission.READ)
@operation(
    operation_id="activeContract",
    reply=Contract,
    reply_description="the contract",
    query=ActiveContractQuery,
)
def active_contract(model: str) -> Response:
    """The active contract at a time.

    The model's active contract at ``at`` (default now).
    """
    at: datetime = ActiveContractQuery.parse().at or utcnow()
    return reply(Contract, contracts_service.active_contract(db_session(), model, at))
