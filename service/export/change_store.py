"""What changed since the last refresh, read for the whole fleet in a few statements, and the
per-model refresh states.

- Bucket change markers (``bucket_changes``): the slices written since the refresher last read
  them, with the token each was read at. Clearing deletes a marker only while it still holds
  that token, so a write the refresher did not see keeps its slice marked.
- Contract fingerprints: per model, its contracts' count and newest ``seq`` and its
  retirements' count; a new version or a retirement changes it.
- Due readings: the stored readings whose ``stale_at`` has come (their trailing window's edge
  passed a bucket holding data), through the index on ``stale_at``.
- Refresh states (``refresh_states``): what each model's readings were computed from, its
  exported slices, worst status and rendered exposition fragment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import and_, delete, func, insert, select
from sqlalchemy.orm import Session

from service.db.models import (
    BucketChange,
    ContractRecord,
    ContractRetirement,
    ModelRecord,
    RefreshState,
    StoredReading,
)

#: Markers per model: slice -> token as read.
Markers = dict[str, dict[str, int]]


@dataclass(frozen=True)
class FleetModel:
    """A model with contracts: its contract fingerprint and when its first was registered."""

    contracts_key: str
    registered_at: datetime


@dataclass(frozen=True)
class StateRow:
    """A model's refresh state (``service.db.models.RefreshState``), fragment aside."""

    model: str
    inputs_key: str
    exported: tuple[str, ...]
    unexported: int
    status: str | None
    rendered_at: datetime


def read_markers(session: Session) -> Markers:
    """Every change marker, by model and slice."""
    out: Markers = {}
    for model, slice_, token in session.execute(
        select(BucketChange.model, BucketChange.slice, BucketChange.token)
    ):
        out.setdefault(model, {})[slice_] = int(token)
    return out


def clear_markers(session: Session, model: str, markers: Mapping[str, int]) -> None:
    """Delete the model's markers that still hold the tokens read (the caller commits)."""
    for slice_, token in sorted(markers.items()):
        session.execute(
            delete(BucketChange).where(
                BucketChange.model == model,
                BucketChange.slice == slice_,
                BucketChange.token == token,
            )
        )


def fleet_models(session: Session) -> dict[str, FleetModel]:
    """Every model with a contract, by name: its contract fingerprint and registration time."""
    query = (
        select(
            ModelRecord.name,
            ModelRecord.created_at,
            func.count(ContractRecord.seq),
            func.max(ContractRecord.seq),
            func.count(ContractRetirement.contract_id),
        )
        .join(ContractRecord, ContractRecord.model == ModelRecord.name)
        .outerjoin(ContractRetirement, ContractRetirement.contract_id == ContractRecord.id)
        .group_by(ModelRecord.name, ModelRecord.created_at)
        .order_by(ModelRecord.name)
    )
    return {
        name: FleetModel(f"{count}:{newest}:{retired}", created)
        for name, created, count, newest, retired in session.execute(query)
    }


def due_readings(session: Session, now: datetime) -> dict[str, set[tuple[str, str]]]:
    """The (cohort, window) of each model's stored readings due for recomputation at ``now``."""
    out: dict[str, set[tuple[str, str]]] = {}
    query = select(StoredReading.model, StoredReading.cohort, StoredReading.window).where(
        and_(StoredReading.stale_at.is_not(None), StoredReading.stale_at <= now)
    )
    for model, cohort, window in session.execute(query):
        out.setdefault(model, set()).add((cohort, window))
    return out


def refresh_states(session: Session) -> dict[str, StateRow]:
    """Every model's refresh state (fragments aside), by model."""
    query = select(
        RefreshState.model,
        RefreshState.inputs_key,
        RefreshState.exported,
        RefreshState.unexported,
        RefreshState.status,
        RefreshState.rendered_at,
    )
    return {
        model: StateRow(model, key, tuple(exported), unexported, status, rendered_at)
        for model, key, exported, unexported, status, rendered_at in session.execute(query)
    }


def refresh_state(session: Session, model: str) -> StateRow | None:
    """One model's refresh state, if it has been refreshed."""
    row = session.execute(
        select(
            RefreshState.model,
            RefreshState.inputs_key,
            RefreshState.exported,
            RefreshState.unexported,
            RefreshState.status,
            RefreshState.rendered_at,
        ).where(RefreshState.model == model)
    ).first()
    if row is None:
        return None
    return StateRow(row[0], row[1], tuple(row[2]), row[3], row[4], row[5])


def fragments(session: Session, models: Iterable[str]) -> dict[str, tuple[datetime, list[str]]]:
    """The rendered fragments of ``models`` (those that have one) with when they were
    rendered, read 500 models per statement."""
    names = sorted(set(models))
    out: dict[str, tuple[datetime, list[str]]] = {}
    for i in range(0, len(names), 500):
        query = select(RefreshState.model, RefreshState.rendered_at, RefreshState.fragment).where(
            RefreshState.model.in_(names[i : i + 500])
        )
        for model, rendered_at, fragment in session.execute(query):
            out[model] = (rendered_at, list(fragment))
    return out


@dataclass(frozen=True)
class NewState:
    """A model's refresh state as a refresh leaves it: ``StateRow``'s fields, the worst status's
    rank (higher is worse, -1 without readings) and the rendered fragment."""

    model: str
    inputs_key: str
    exported: tuple[str, ...]
    unexported: int
    status: str | None
    severity: int
    fragment: list[str]
    rendered_at: datetime


def save_states(session: Session, states: Sequence[NewState]) -> None:
    """Store (replace) the refresh states of their models (the caller commits): one delete and
    one insert per 500 models."""
    for i in range(0, len(states), 500):
        chunk = states[i : i + 500]
        session.execute(
            delete(RefreshState).where(RefreshState.model.in_([s.model for s in chunk]))
        )
        session.execute(
            insert(RefreshState),
            [{**asdict(s), "exported": list(s.exported)} for s in chunk],
        )
    session.flush()


def page_of_models(
    session: Session, offset: int, limit: int
) -> tuple[list[tuple[str, str | None]], dict[str | None, int]]:
    """A page of models worst status first (then by name; models not yet refreshed last) with
    their worst status, and how many models have each worst status (None: not refreshed)."""
    severity = func.coalesce(RefreshState.severity, -1)
    query = (
        select(ModelRecord.name, RefreshState.status)
        .outerjoin(RefreshState, RefreshState.model == ModelRecord.name)
        .order_by(severity.desc(), ModelRecord.name)
        .offset(offset)
        .limit(limit)
    )
    page = [(name, status) for name, status in session.execute(query)]
    counts_query = (
        select(RefreshState.status, func.count())
        .select_from(ModelRecord)
        .outerjoin(RefreshState, RefreshState.model == ModelRecord.name)
        .group_by(RefreshState.status)
    )
    counts = {status: int(n) for status, n in session.execute(counts_query)}
    return page, counts


@dataclass(frozen=True)
class ContractRef:
    """A contract by id and version, and whether it is retired."""

    id: str
    version: int
    retired: bool


def current_contracts(
    session: Session, models: Iterable[str], now: datetime
) -> dict[str, ContractRef]:
    """Each model's current contract (its newest version created by ``now`` and not retired
    then, else its newest version), without loading the contracts' documents."""
    names = sorted(set(models))
    query = (
        select(
            ContractRecord.model,
            ContractRecord.id,
            ContractRecord.version,
            ContractRecord.created_at,
            ContractRetirement.retired_at,
        )
        .outerjoin(ContractRetirement, ContractRetirement.contract_id == ContractRecord.id)
        .where(ContractRecord.model.in_(names))
        .order_by(ContractRecord.model, ContractRecord.version.desc())
    )
    active: dict[str, ContractRef] = {}
    newest: dict[str, ContractRef] = {}
    for model, contract_id, version, created_at, retired_at in session.execute(query):
        ref = ContractRef(contract_id, version, retired_at is not None)
        newest.setdefault(model, ref)
        if created_at <= now and (retired_at is None or retired_at > now):
            active.setdefault(model, ref)
    return {model: active.get(model, ref) for model, ref in newest.items()}
