"""Use cases of the audit log: verify it with every record it vouches for, report its head.

The audit package sits below the contracts, so the contracts come in as a ``ContractSource``
(``service.contracts.service.stored_contracts``): every stored contract with the hash
recomputed from its fields by the code that defines that hash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlalchemy.orm import Session

from service.audit import record_store
from service.audit import store as audit
from service.audit.chain import Anchor, AuditKeyring, ChainVerifier
from service.audit.head import KeyedHead, head_problem, log_end
from service.audit.head_store import read_head
from service.audit.records import Problems, RecordLedger, StoredContract
from service.audit.verification import (
    AuditVerification,
    ChainEnd,
    CheckedRows,
    KeyedHeadCheck,
    RecordsCheck,
)
from service.common.errors import Conflict

ContractSource = Callable[[Session], Iterable[StoredContract]]


def verify_audit(
    session: Session, anchor: Anchor | None = None, *, contracts: ContractSource
) -> AuditVerification:
    """Verify the chain (under the session's keys), the anchor when given, the keyed head when
    a key is configured, and every contract, gate decision and retirement against its event."""
    audit.hold_appends(session)
    keyring = audit.keyring_of(session)
    keyed_head = None if keyring.signing is None else read_head(session)
    verifier = ChainVerifier(keyring, anchor, None if keyed_head is None else keyed_head.seq)
    ledger = RecordLedger()
    for event in audit.iter_chain(session):
        verifier.feed(event)
        ledger.feed(event)

    problems = Problems()
    chain = verifier.chain_report()
    if not chain.valid:
        problems.add({"check": "chain", "seq": chain.first_invalid_seq, "problem": chain.reason})
    anchor_report = verifier.anchor_report()
    if anchor_report is not None and not anchor_report.valid:
        problems.add({"check": "anchor", "seq": anchor_report.seq, "problem": anchor_report.reason})
    head_report = None
    if keyring.signing is not None:
        head_report = _keyed_head_report(keyed_head, keyring, verifier)
        if not head_report.valid:
            problems.add(
                {"check": "keyed_head", "seq": head_report.seq, "problem": head_report.reason}
            )
    checked = CheckedRows(
        events=verifier.events,
        contracts=ledger.check_contracts(contracts(session), problems),
        decisions=ledger.check_decisions(record_store.stored_decisions(session), problems),
        retirements=ledger.check_retirements(record_store.list_retirements(session), problems),
    )

    def records(check: str, rows: int) -> RecordsCheck:
        return RecordsCheck(problems.of(check) == 0, rows, problems.of(check))

    return AuditVerification(
        valid=problems.count == 0,
        checked=checked,
        events=verifier.events,
        head=verifier.head_report(),
        chain=chain,
        anchor=anchor_report,
        keyed_head=head_report,
        contracts=records("contract", checked.contracts),
        decisions=records("decision", checked.decisions),
        retirements=records("retirement", checked.retirements),
        problem_count=problems.count,
        problems=problems.listed,
    )


def _keyed_head_report(
    head: KeyedHead | None, keyring: AuditKeyring, verifier: ChainVerifier
) -> KeyedHeadCheck:
    reason = head_problem(head, keyring, log_end(verifier))
    if head is None:
        return KeyedHeadCheck(None, None, None, None, valid=reason is None, reason=reason)
    return KeyedHeadCheck(
        head.events, head.seq, head.sha256, head.key_id, valid=reason is None, reason=reason
    )


def audit_head(session: Session, *, contracts: ContractSource) -> ChainEnd | None:
    """The head of a log that verifies, for an operator to keep outside the database; raise
    ``Conflict`` with the reason when the log does not verify (an anchor of a broken log
    would vouch for the tampering)."""
    report = verify_audit(session, contracts=contracts)
    if not report.valid:
        raise Conflict(
            f"the audit log does not verify ({_count(report.problem_count, 'problem')}; "
            f"the first: {report.reason})"
        )
    return report.head


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


#: A read that needs nothing but its query is the store's function itself.
list_events = audit.list_events
