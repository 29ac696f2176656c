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
    AuditKey,
    AuditKeyring,
    ChainVerifier,
    event_digest,
)
from service.audit.events import CREATION_EVENTS, AuditResealed, EventPayload, KeyEnabled
from service.audit.head import KeyedHead, head_problem, log_end
from service.audit.head_store import read_head, write_head
from service.audit.records import CONTRACT_CREATED
from service.common.errors import Conflict
from service.db.backend import backend_of
from service.db.models import AuditEventRecord

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
    event: EventPayload,
    *,
    actor: str,
    now: datetime,
    model: str | None = None,
    contract_id: str | None = None,
) -> None:
    """Append one event of ``event``'s kind with its details, chained to the last one (in the
    caller's transaction).

    Under a signing key the head is not yet under, an ``audit_key_enabled`` event comes first;
    under a signing key the keyed head advances to the new event, if it vouched for the log
    before it (a head that no longer matches is left as it is, for verification to report).
    """
    prev = _lock_and_head(session)
    keyring = keyring_of(session)
    signing = keyring.signing
    head = None if signing is None else read_head(session)
    appended = _Appended(event.TYPE, actor, now, event.details(), model, contract_id)
    written = _write(session, prev, signing, appended)
    if signing is not None:
        _advance_head(session, keyring, signing, head, written)


@dataclass(frozen=True)
class _Appended:
    """An event to append: what its hash covers besides the hash before it."""

    type: str
    actor: str
    ts: datetime
    details: dict[str, Any]
    model: str | None = None
    contract_id: str | None = None


def _write(
    session: Session, prev: str, signing: AuditKey | None, event: _Appended
) -> list[AuditEventRecord]:
    """Insert one event after ``prev`` under ``signing``, preceded by an
    ``audit_key_enabled`` event when the chain's newest segment is under another key (or none);
    returns the rows written, oldest first."""
    segment = _segment_key_id(session)
    written: list[AuditEventRecord] = []
    if signing is not None and segment != signing.key_id:
        written.append(
            _start_segment(session, prev, signing, segment, actor=event.actor, now=event.ts)
        )
        prev = written[-1].sha256
    elif signing is None and segment is not None:
        log.warning(
            "appending a plain audit event after the segment keyed with %s: this process has "
            "no CALMON_AUDIT_KEY, and verification will report it",
            segment,
        )
    written.append(_insert(session, prev, signing, event))
    return written


def _advance_head(
    session: Session,
    keyring: AuditKeyring,
    key: AuditKey,
    head: KeyedHead | None,
    written: list[AuditEventRecord],
) -> None:
    """Move the keyed head over the events just ``written``, if it ended where they begin.

    A missing head is not created here: only ``seal`` (for a log not keyed yet) and ``reseal``
    write one, so deleting the head (with or without the events it vouched for) cannot be
    covered up by the next append.
    """
    if head is None or not head.vouches_for(keyring, written[0].prev_sha256):
        log.warning(
            "the keyed audit head is %s: it is not advanced, and verification reports it "
            "(`calmon audit reseal --i-know` writes a new one)",
            "missing" if head is None else "not at the end of the log",
        )
        return
    last = written[-1]
    write_head(
        session,
        KeyedHead.sign(key, events=head.events + len(written), seq=last.seq, sha256=last.sha256),
    )


def seal(session: Session, *, actor: str, now: datetime) -> list[str]:
    """Put the log under the signing key: start a segment unless the head is already under
    it, and write the keyed head when the log becomes keyed. Returns what was done, or why
    not, one sentence each (empty when nothing was); the caller commits.

    A head is written only for a log with no keyed event before this call (never keyed, or
    empty), and only after its chain verifies: that is the moment the keyed head starts to
    vouch for the log's end. A log that has keyed events but no head lost it (with or without
    its newest events), so no head is written: only ``reseal``, run by an administrator,
    writes one over it.
    """
    keyring = keyring_of(session)
    signing = keyring.signing
    if signing is None:
        return []
    prev = _lock_and_head(session)
    head = read_head(session)
    done: list[str] = []
    segment = _segment_key_id(session)
    if segment != signing.key_id:
        started = _start_segment(session, prev, signing, segment, actor=actor, now=now)
        done.append("the audit chain continues under CALMON_AUDIT_KEY")
        if head is not None:
            _advance_head(session, keyring, signing, head, [started])
    if head is None:
        done.append(
            _establish_head(session, keyring, signing)
            if segment is None
            else "no keyed audit head is written: the log has keyed events but no keyed head "
            "(it was deleted, with or without the newest events), and verification reports "
            "it; after finding out why, an administrator writes a new one with "
            "`calmon audit reseal --i-know`"
        )
    return done


def _establish_head(session: Session, keyring: AuditKeyring, key: AuditKey) -> str:
    verifier = ChainVerifier(keyring)
    for event in iter_chain(session):
        verifier.feed(event)
    chain, last = verifier.chain_report(), verifier.head
    if not chain.valid or last is None:
        return (
            "no keyed audit head is written: the audit chain does not verify "
            f"(seq {chain.first_invalid_seq}: {chain.reason})"
        )
    write_head(
        session, KeyedHead.sign(key, events=verifier.events, seq=last.seq, sha256=last.sha256)
    )
    return f"the keyed audit head now vouches for the {verifier.events} events up to seq {last.seq}"


@dataclass(frozen=True)
class Resealed:
    """What ``reseal`` did: the head it replaced (None when there was none), why that head
    did not vouch for the log, and the head it wrote."""

    previous: KeyedHead | None
    problem: str
    head: KeyedHead


def reseal(session: Session, *, actor: str, now: datetime, reason: str | None) -> Resealed | None:
    """Sign a keyed head over the log as it stands, after an ``audit_resealed`` event that
    records who did it, why, the head it replaces and where the log ended; the caller commits.

    For an administrator who found out why the keyed head no longer vouches for the log (its
    newest events or the head itself deleted, a log keyed before calmon kept a head): from then
    on the head vouches for the log as it is, so verification no longer reports what was lost
    before it, and the event says it was resealed. Returns None, writing nothing, when the head
    already vouches for the log; raises ``Conflict`` without the signing key, and when the chain
    does not link or match its hashes (a head would vouch for the tampering).
    """
    keyring = keyring_of(session)
    signing = keyring.signing
    if signing is None:
        raise Conflict("resealing the audit log needs its key: set CALMON_AUDIT_KEY")
    prev = _lock_and_head(session)
    head = read_head(session)
    verifier = ChainVerifier(keyring, head_seq=None if head is None else head.seq)
    for event in iter_chain(session):
        verifier.feed(event)
    if not verifier.hashes_match:
        chain = verifier.chain_report()
        raise Conflict(
            f"the audit chain does not verify (seq {chain.first_invalid_seq}: "
            f"{chain.reason}): a keyed head would vouch for it, so none is written"
        )
    end = log_end(verifier)
    problem = head_problem(head, keyring, end)
    if problem is None:
        return None
    resealing = AuditResealed(
        reason=reason,
        problem=problem,
        previous_head=None if head is None else head.to_dict(),
        log_end={"events": end.events, "seq": end.last_seq, "sha256": end.last_sha256},
    )
    written = _write(
        session, prev, signing, _Appended(resealing.TYPE, actor, now, resealing.details())
    )
    last = written[-1]
    resealed = KeyedHead.sign(
        signing, events=end.events + len(written), seq=last.seq, sha256=last.sha256
    )
    write_head(session, resealed)
    return Resealed(head, problem, resealed)


def hold_appends(session: Session) -> None:
    """Take the append lock for the rest of the session's transaction, so the log, its keyed
    head and the rows written with its events are read at one point in time (appends wait;
    on SQLite every transaction already holds the write lock)."""
    backend_of(session).advisory_lock(session, _APPEND_LOCK)


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
) -> AuditEventRecord:
    enabled = KeyEnabled(key_id=key.key_id, previous_key_id=previous_key_id)
    return _insert(session, prev, key, _Appended(enabled.TYPE, actor, now, enabled.details()))


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
    session: Session, prev: str, key: AuditKey | None, event: _Appended
) -> AuditEventRecord:
    record = AuditEventRecord(
        ts=event.ts,
        type=event.type,
        actor=event.actor,
        model=event.model,
        contract_id=event.contract_id,
        details=event.details,
        prev_sha256=prev,
        sha256=event_digest(prev, event, None if key is None else key.secret),
    )
    session.add(record)
    session.flush()
    return record


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
            AuditEventRecord.type.in_(tuple(CREATION_EVENTS)),
        )
        .order_by(AuditEventRecord.seq)
        .limit(1)
    )


def creation_events(session: Session, contract_id: str) -> list[AuditEvent]:
    """The events that recorded a contract's creation, oldest first (one, unless tampered)."""
    query = (
        select(AuditEventRecord)
        .where(
            AuditEventRecord.contract_id == contract_id,
            AuditEventRecord.type.in_(CONTRACT_CREATED),
        )
        .order_by(AuditEventRecord.seq)
    )
    return [_to_event(r) for r in session.scalars(query)]


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
