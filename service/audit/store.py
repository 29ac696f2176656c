"""The append-only, hash-chained audit log (the chain's rules are in ``service.audit.chain``).

The HMAC keys travel with the session factory (``bind_keyring``), so every writer, whether a
request, the refresher, a CLI command, appends under the configured key without passing it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.audit.chain import (
    GENESIS,
    KEY_ENABLED,
    NO_KEYS,
    Anchor,
    AuditKey,
    AuditKeyring,
    ChainVerifier,
    RetirementRow,
    event_digest,
)
from service.db.backend import backend_of
from service.db.models import AuditEventRecord, ContractRetirement

log = logging.getLogger(__name__)

#: Key of the PostgreSQL advisory lock that serialises appends (so each sees its predecessor).
_APPEND_LOCK = 0x63616C6D6F6E
_KEYRING = "calmon.audit_keyring"


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    ts: datetime
    type: str
    actor: str
    model: str | None
    contract_id: str | None
    details: dict[str, Any]
    prev_sha256: str
    sha256: str


def bind_keyring(sessions: sessionmaker[Session], keyring: AuditKeyring) -> None:
    """Make every session of ``sessions`` append and verify under ``keyring``."""
    info = dict(sessions.kw.get("info") or {})
    info[_KEYRING] = keyring
    sessions.configure(info=info)


def keyring_of(session: Session) -> AuditKeyring:
    keyring = session.info.get(_KEYRING, NO_KEYS)
    assert isinstance(keyring, AuditKeyring)
    return keyring


def append_event(
    session: Session,
    *,
    type: str,
    actor: str,
    now: datetime,
    model: str | None = None,
    contract_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one event, chained to the last one (in the caller's transaction).

    Under a signing key the head is not yet under, an ``audit_key_enabled`` event comes first.
    """
    prev = _lock_and_head(session)
    signing = keyring_of(session).signing
    segment = _segment_key_id(session)
    if signing is not None and segment != signing.key_id:
        prev = _start_segment(session, prev, signing, segment, actor=actor, now=now)
    elif signing is None and segment is not None:
        log.warning(
            "appending a plain audit event after the segment keyed with %s: this process has "
            "no CALMON_AUDIT_KEY, and verification will report it",
            segment,
        )
    _insert(
        session,
        prev,
        signing,
        type=type,
        actor=actor,
        now=now,
        model=model,
        contract_id=contract_id,
        details=details or {},
    )


def seal(session: Session, *, actor: str, now: datetime) -> bool:
    """Start a segment under the signing key unless the head is already under it; True if an
    ``audit_key_enabled`` event was written (the caller commits)."""
    signing = keyring_of(session).signing
    if signing is None:
        return False
    prev = _lock_and_head(session)
    segment = _segment_key_id(session)
    if segment == signing.key_id:
        return False
    _start_segment(session, prev, signing, segment, actor=actor, now=now)
    return True


def _lock_and_head(session: Session) -> str:
    """The head's hash, after taking the append lock.

    On PostgreSQL a transaction-scoped advisory lock orders concurrent appends; SQLite's write
    transactions are serialised already (``BEGIN IMMEDIATE``).
    """
    backend_of(session).advisory_lock(session, _APPEND_LOCK)
    return (
        session.scalar(
            select(AuditEventRecord.sha256).order_by(AuditEventRecord.seq.desc()).limit(1)
        )
        or GENESIS
    )


def _start_segment(
    session: Session,
    prev: str,
    key: AuditKey,
    previous_key_id: str | None,
    *,
    actor: str,
    now: datetime,
) -> str:
    return _insert(
        session,
        prev,
        key,
        type=KEY_ENABLED,
        actor=actor,
        now=now,
        details={"key_id": key.key_id, "previous_key_id": previous_key_id},
    )


def _segment_key_id(session: Session) -> str | None:
    """The key id of the newest keyed segment, if the chain has one."""
    details = session.scalar(
        select(AuditEventRecord.details)
        .where(AuditEventRecord.type == KEY_ENABLED)
        .order_by(AuditEventRecord.seq.desc())
        .limit(1)
    )
    return None if details is None else str(details.get("key_id"))


def _insert(
    session: Session,
    prev: str,
    key: AuditKey | None,
    *,
    type: str,
    actor: str,
    now: datetime,
    model: str | None = None,
    contract_id: str | None = None,
    details: dict[str, Any],
) -> str:
    digest = event_digest(
        prev,
        ts=now,
        type=type,
        actor=actor,
        model=model,
        contract_id=contract_id,
        details=details,
        key=None if key is None else key.secret,
    )
    session.add(
        AuditEventRecord(
            ts=now,
            type=type,
            actor=actor,
            model=model,
            contract_id=contract_id,
            details=details,
            prev_sha256=prev,
            sha256=digest,
        )
    )
    session.flush()
    return digest


def _to_event(r: AuditEventRecord) -> AuditEvent:
    """The stored event; ``details`` that are not an object (written by hand) are wrapped, so
    the event no longer matches its hash and verification reports it."""
    details = r.details if isinstance(r.details, dict) else {"(not an object)": r.details}
    return AuditEvent(
        r.seq,
        r.ts,
        r.type,
        r.actor,
        r.model,
        r.contract_id,
        dict(details),
        r.prev_sha256,
        r.sha256,
    )


def list_events(
    session: Session,
    *,
    model: str | None = None,
    type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after_seq: int | None = None,
    limit: int = 100,
    newest_first: bool = False,
) -> list[AuditEvent]:
    """Events in append order (oldest first, or newest first), filtered; ``after_seq``
    continues an oldest-first page."""
    order = AuditEventRecord.seq.desc() if newest_first else AuditEventRecord.seq
    query = select(AuditEventRecord).order_by(order).limit(limit)
    if model is not None:
        query = query.where(AuditEventRecord.model == model)
    if type is not None:
        query = query.where(AuditEventRecord.type == type)
    if since is not None:
        query = query.where(AuditEventRecord.ts >= since)
    if until is not None:
        query = query.where(AuditEventRecord.ts < until)
    if after_seq is not None:
        query = query.where(AuditEventRecord.seq > after_seq)
    return [_to_event(r) for r in session.scalars(query)]


def creation_event_type(session: Session, model: str, contract_id: str) -> str | None:
    """The type of the event that recorded a contract's creation (``contract_fitted`` or
    ``contract_registered``), if the chain holds one."""
    return session.scalar(
        select(AuditEventRecord.type)
        .where(
            AuditEventRecord.model == model,
            AuditEventRecord.contract_id == contract_id,
            AuditEventRecord.type.in_(("contract_fitted", "contract_registered")),
        )
        .order_by(AuditEventRecord.seq)
        .limit(1)
    )


def iter_chain(session: Session, page: int = 1000) -> Iterator[AuditEvent]:
    """Every event in append order, read in pages."""
    after = 0
    while True:
        rows = list(
            session.scalars(
                select(AuditEventRecord)
                .where(AuditEventRecord.seq > after)
                .order_by(AuditEventRecord.seq)
                .limit(page)
            )
        )
        if not rows:
            return
        for row in rows:
            yield _to_event(row)
        after = rows[-1].seq


def verify_chain(session: Session, anchor: Anchor | None = None) -> dict[str, Any]:
    """Walk the chain under the session's keys, check ``anchor`` and every retirement row.

    See ``ChainVerifier.report`` for the report.
    """
    verifier = ChainVerifier(keyring_of(session), anchor)
    for event in iter_chain(session):
        verifier.feed(event)
    return verifier.report(list_retirements(session))


def list_retirements(session: Session) -> list[RetirementRow]:
    """Every retirement row (there is at most one per contract)."""
    rows = session.scalars(select(ContractRetirement).order_by(ContractRetirement.contract_id))
    return [RetirementRow(r.contract_id, r.reason, r.retired_at, r.retired_by) for r in rows]
