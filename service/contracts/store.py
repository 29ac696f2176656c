"""Contracts, their versions and retirements."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping, and_, exists, select, update
from sqlalchemy.orm import Session, aliased

from service.audit.chain import RetirementRow
from service.audit.records import StoredContract
from service.calibration import CalibrationInputError
from service.common.errors import ErrorDetail, UnreadableContract
from service.contracts.model import (
    Contract,
    ContractSpec,
    Retirement,
    content_sha256,
    hashed_document,
    spec_from_stored,
)
from service.contracts.replies import stored_field_problems
from service.db.backend import backend_of
from service.db.models import ContractRecord, ContractRetirement, ModelRecord, table_of
from service.db.paging import rows_by_seq
from service.db.types import UnparsableJson


def claim_next_version(session: Session, model: str, now: datetime) -> int:
    """Reserve the model's next contract version, gap-free under concurrent writers.

    The counter row is created if missing and incremented in one UPDATE ... RETURNING, which holds
    the row lock until the caller's transaction ends; a rollback releases the number unused.
    """
    session.execute(
        backend_of(session)
        .insert(table_of(ModelRecord))
        .values(name=model, latest_version=0, created_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    version = session.scalar(
        update(ModelRecord)
        .where(ModelRecord.name == model)
        .values(latest_version=ModelRecord.latest_version + 1)
        .returning(ModelRecord.latest_version)
    )
    assert version is not None
    return int(version)


#: The columns of ``contracts`` that hold a spec field, by the field's name.
_SPEC_COLUMNS = (
    "model",
    "checkpoint",
    "task",
    "classes",
    "calibrator",
    "objective",
    "population",
    "outcome",
    "data_window",
    "split",
    "bin_edges",
    "baseline",
    "policy",
)


def insert_contract(session: Session, contract: Contract) -> None:
    """Store a new contract (its spec as the JSON its hash covers)."""
    session.add(
        ContractRecord(
            id=contract.id,
            version=contract.version,
            created_at=contract.created_at,
            created_by=contract.created_by,
            content_sha256=contract.content_sha256,
            **contract.spec.to_dict(),
        )
    )
    session.flush()


#: What reading a stored spec back may raise when a row holds what the service never writes.
_READ_BACK_ERRORS = (AttributeError, CalibrationInputError, KeyError, TypeError, ValueError)


class _Unreadable(Exception):
    """The fields of a stored row that cannot be read back, each with why."""

    def __init__(self, details: list[ErrorDetail]) -> None:
        super().__init__("; ".join(f"{d.field}: {d.message}" for d in details))
        self.details = details


def _conforming(fields: Mapping[str, Any]) -> None:
    """Raise ``_Unreadable`` naming every field of ``fields`` that is not parsable JSON, or
    not of the shape the ``Contract`` reply declares."""
    unparsable = [
        ErrorDetail(name, "the stored JSON cannot be parsed")
        for name, value in fields.items()
        if isinstance(value, UnparsableJson)
    ]
    problems = unparsable or stored_field_problems(fields)
    if problems:
        raise _Unreadable(problems)


def _spec_of(fields: Mapping[str, Any]) -> ContractSpec:
    """The spec of a row's columns (the spec's, and any other the reply carries as stored),
    each first read through the ``Contract`` reply's declaration, then by ``spec_from_stored``;
    raise ``_Unreadable`` naming what cannot be read back."""
    _conforming(fields)
    try:
        return spec_from_stored(fields)
    except _READ_BACK_ERRORS as exc:
        field = getattr(exc, "field", None) or "contract"
        raise _Unreadable([ErrorDetail(field, str(exc))]) from exc


@dataclass(frozen=True)
class UnreadableRow:
    """A stored contract whose fields cannot be read back: listed apart, with why."""

    id: str
    model: str
    version: int
    problem: str


#: The columns a reply carries as stored besides the spec's (the hash is not recomputed here).
_SERVER_COLUMNS = ("id", "version", "created_by", "content_sha256")


def _to_contract(row: ContractRecord, retirement: ContractRetirement | None) -> Contract:
    """The stored contract, every column read through the ``Contract`` reply's declaration;
    ``UnreadableContract`` names the fields that cannot be read back."""
    try:
        spec = _spec_of({name: getattr(row, name) for name in (*_SERVER_COLUMNS, *_SPEC_COLUMNS)})
    except _Unreadable as exc:
        raise UnreadableContract(
            f"contract {row.id} (version {row.version}) stores a field that cannot be read "
            "back; register a new version",
            exc.details,
        ) from exc
    return Contract(
        id=row.id,
        version=row.version,
        spec=spec,
        created_at=row.created_at,
        created_by=row.created_by,
        content_sha256=row.content_sha256,
        retirement=None
        if retirement is None
        else Retirement(retirement.reason, retirement.retired_at, retirement.retired_by),
    )


def _with_retirement():  # type: ignore[no-untyped-def]
    return select(ContractRecord, ContractRetirement).outerjoin(
        ContractRetirement, ContractRetirement.contract_id == ContractRecord.id
    )


def get_contract(session: Session, contract_id: str) -> Contract | None:
    row = session.execute(_with_retirement().where(ContractRecord.id == contract_id)).first()
    return None if row is None else _to_contract(row[0], row[1])


def _active_at_filter(at: datetime):  # type: ignore[no-untyped-def]
    """Contracts created at or before ``at`` and not retired by then."""
    retirement = aliased(ContractRetirement)
    retired_by_then = exists().where(
        retirement.contract_id == ContractRecord.id, retirement.retired_at <= at
    )
    return and_(ContractRecord.created_at <= at, ~retired_by_then)


def active_contract_at(session: Session, model: str, at: datetime) -> Contract | None:
    """The newest version of ``model`` created at or before ``at`` and not retired at ``at``."""
    row = session.execute(
        _with_retirement()
        .where(ContractRecord.model == model, _active_at_filter(at))
        .order_by(ContractRecord.version.desc())
        .limit(1)
    ).first()
    return None if row is None else _to_contract(row[0], row[1])


def current_contracts(session: Session, models: Sequence[str], at: datetime) -> dict[str, Contract]:
    """Each of ``models``' current contract at ``at`` (its newest version created by then and not
    retired then, else its newest version; ``service.contracts.service.current_contract``), in
    one statement per 500 models; a model without contracts is left out."""
    names = sorted(set(models))
    chosen: dict[str, tuple[ContractRecord, ContractRetirement | None]] = {}
    newest: dict[str, tuple[ContractRecord, ContractRetirement | None]] = {}
    for i in range(0, len(names), 500):
        query = (
            _with_retirement()
            .where(ContractRecord.model.in_(names[i : i + 500]))
            .order_by(ContractRecord.model, ContractRecord.version.desc())
        )
        for record, retirement in session.execute(query):
            newest.setdefault(record.model, (record, retirement))
            retired = retirement is not None and retirement.retired_at <= at
            if record.created_at <= at and not retired:
                chosen.setdefault(record.model, (record, retirement))
    return {model: _to_contract(*chosen.get(model, row)) for model, row in newest.items()}


def list_contracts(
    session: Session,
    *,
    model: str | None = None,
    active_at: datetime | None = None,
    before_seq: int | None = None,
    limit: int = 50,
) -> list[tuple[int, Contract | UnreadableRow]]:
    """Contracts newest first as ``(seq, contract)``; ``before_seq`` continues a page. A row
    that cannot be read back is listed as an ``UnreadableRow`` in its place.

    With ``active_at``, only each model's active contract at that time.
    """
    query = _with_retirement().order_by(ContractRecord.seq.desc()).limit(limit)
    if model is not None:
        query = query.where(ContractRecord.model == model)
    if before_seq is not None:
        query = query.where(ContractRecord.seq < before_seq)
    if active_at is not None:
        newer = aliased(ContractRecord)
        newer_retirement = aliased(ContractRetirement)
        newer_retired = exists().where(
            newer_retirement.contract_id == newer.id, newer_retirement.retired_at <= active_at
        )
        shadowing = exists().where(
            newer.model == ContractRecord.model,
            newer.version > ContractRecord.version,
            newer.created_at <= active_at,
            ~newer_retired,
        )
        query = query.where(_active_at_filter(active_at), ~shadowing)
    listed: list[tuple[int, Contract | UnreadableRow]] = []
    for record, retirement in session.execute(query):
        try:
            listed.append((record.seq, _to_contract(record, retirement)))
        except UnreadableContract as exc:
            problem = str(_Unreadable(exc.details))
            listed.append(
                (record.seq, UnreadableRow(record.id, record.model, record.version, problem))
            )
    return listed


@dataclass(frozen=True)
class VersionClasses:
    """The classes of one contract version (``classes`` as stored, in class-index order)."""

    id: str
    version: int
    classes: tuple[str, ...]


def model_classes(session: Session, model: str) -> list[VersionClasses]:
    """The classes of every contract version of ``model``, newest version first (only these
    columns are read: no spec is rebuilt)."""
    query = (
        select(ContractRecord.id, ContractRecord.version, ContractRecord.classes)
        .where(ContractRecord.model == model)
        .order_by(ContractRecord.version.desc())
    )
    return [
        VersionClasses(
            id, version, () if stored_field_problems({"classes": classes}) else tuple(classes)
        )
        for id, version, classes in session.execute(query)
    ]


def model_exists(session: Session, model: str) -> bool:
    return session.scalar(select(ModelRecord.name).where(ModelRecord.name == model)) is not None


def insert_retirement(
    session: Session, contract_id: str, *, reason: str, retired_by: str, now: datetime
) -> RetirementRow:
    """Store a retirement row; return it as stored (what its audit event must vouch for)."""
    session.add(
        ContractRetirement(
            contract_id=contract_id, reason=reason, retired_at=now, retired_by=retired_by
        )
    )
    session.flush()
    return RetirementRow(contract_id, reason, now, retired_by)


def latest_contract(session: Session, model: str) -> Contract | None:
    """The highest version of ``model``, retired or not."""
    row = session.execute(
        _with_retirement()
        .where(ContractRecord.model == model)
        .order_by(ContractRecord.version.desc())
        .limit(1)
    ).first()
    return None if row is None else _to_contract(row[0], row[1])


def model_names(session: Session) -> list[str]:
    """Every model that has at least one contract, sorted."""
    return list(session.scalars(select(ModelRecord.name).order_by(ModelRecord.name)))


def _stored(row: RowMapping) -> StoredContract:
    """A contract row with the hash recomputed from its stored fields, read back through the
    spec as ``content_sha256`` was first computed (or why the fields cannot be read back)."""
    recomputed, unreadable = None, None
    try:
        spec = _spec_of({name: row[name] for name in _SPEC_COLUMNS})
        recomputed = content_sha256(
            hashed_document(row["id"], row["version"], spec, row["created_at"], row["created_by"])
        )
    except _Unreadable as exc:
        unreadable = str(exc)
    return StoredContract(
        seq=row["seq"],
        id=row["id"],
        model=row["model"],
        version=row["version"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        content_sha256=row["content_sha256"],
        recomputed_sha256=recomputed,
        unreadable=unreadable,
    )


def stored_contracts(session: Session, page: int = 100) -> Iterator[StoredContract]:
    """Every stored contract with its recomputed hash, in the order stored, ``page`` rows at a
    time (read as plain column tuples, so the session does not keep them)."""
    for row in rows_by_seq(session, table_of(ContractRecord), page):
        yield _stored(row)


def unreadable_among(session: Session, contract_ids: Sequence[str]) -> dict[str, str]:
    """``{id: why}`` of the contracts among ``contract_ids`` whose fields cannot be read back."""
    table = table_of(ContractRecord)
    names = (*_SERVER_COLUMNS, *_SPEC_COLUMNS)
    columns = [table.c[name] for name in names]
    found: dict[str, str] = {}
    for row in session.execute(select(*columns).where(table.c.id.in_(list(contract_ids)))):
        try:
            _spec_of({name: row._mapping[name] for name in names})
        except _Unreadable as exc:
            found[row.id] = str(exc)
    return found


def stored_contract(session: Session, contract_id: str) -> StoredContract | None:
    """One stored contract with its recomputed hash, or None for an unknown id."""
    table = table_of(ContractRecord)
    row = session.execute(select(table).where(table.c.id == contract_id)).first()
    return None if row is None else _stored(row._mapping)
