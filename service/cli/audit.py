"""``calmon audit head|verify|reseal``: anchor, verify and reseal the audit log's hash chain."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from service.cli.database import session
from service.cli.usage import UsageError
from service.config import load_settings

if TYPE_CHECKING:
    from service.audit.verification import AuditVerification
    from service.cli.usage import Commands


def _head(_args: argparse.Namespace) -> int:
    from service.audit.service import audit_head
    from service.common.errors import Conflict
    from service.contracts.service import stored_contracts

    try:
        with session() as opened:
            head = audit_head(opened, contracts=stored_contracts)
    except Conflict as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 1
    if head is None:
        print("calmon: the audit chain is empty: nothing to anchor yet", file=sys.stderr)
        return 1
    print(f"{head.seq} {head.sha256}")
    print(
        f"the log verifies; keep this head outside the database, then check it later with "
        f"`calmon audit verify --expected-seq {head.seq} --expected-sha256 {head.sha256}`",
        file=sys.stderr,
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    import re

    from service.audit.chain import Anchor
    from service.audit.replies import ChainVerification
    from service.audit.service import verify_audit
    from service.contracts.service import stored_contracts

    if (args.expected_seq is None) != (args.expected_sha256 is None):
        raise UsageError("give --expected-seq and --expected-sha256 together")
    anchor = None
    if args.expected_seq is not None:
        if args.expected_seq < 1 or not re.fullmatch(r"[0-9a-f]{64}", args.expected_sha256):
            raise UsageError("--expected-seq is >= 1 and --expected-sha256 is 64 lower-case hex")
        anchor = Anchor(args.expected_seq, args.expected_sha256)
    with session() as opened:
        report = verify_audit(opened, anchor, contracts=stored_contracts)
    shown = ChainVerification.model_validate(report).model_dump(mode="json", exclude_unset=True)
    # Each problem's keys in the order its check wrote them, as this command has always printed.
    shown["problems"] = report.problems
    print(json.dumps(shown, indent=2))
    for line in _verification_summary(report):
        print(line, file=sys.stderr)
    return 0 if report.valid else 1


def _reseal(args: argparse.Namespace) -> int:
    from service.audit.store import reseal
    from service.common.clock import utcnow
    from service.common.errors import Conflict

    settings = load_settings()
    if not settings.audit_key:
        raise UsageError("calmon audit reseal needs the audit key: set CALMON_AUDIT_KEY")
    if not args.i_know:
        raise UsageError(
            "calmon audit reseal signs a new keyed head over the audit log as it stands, so "
            "verification stops reporting events deleted from its end (and the rows they "
            "recorded); find out why the head does not match first (`calmon audit verify`), "
            "then run it again with --i-know"
        )
    try:
        with session(settings) as opened:
            resealed = reseal(opened, actor="cli", now=utcnow(), reason=args.reason)
            opened.commit()
    except Conflict as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 1
    if resealed is None:
        print("the keyed audit head already vouches for the log: nothing written", file=sys.stderr)
        return 0
    head = resealed.head
    print(f"{head.seq} {head.sha256}")
    print(
        f"resealed the audit log (it was: {resealed.problem}); the keyed head now vouches for "
        f"the {head.events} events up to seq {head.seq}, the last the audit_resealed event",
        file=sys.stderr,
    )
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _verification_summary(report: AuditVerification) -> list[str]:
    """What was checked, and every listed problem, one per line (for stderr)."""
    from service.audit.verification import problem_text

    checked = report.checked
    what = (
        f"checked {_count(checked.events, 'event')}, "
        f"{_count(checked.contracts, 'contract')}, "
        f"{_count(checked.decisions, 'gate decision')} and "
        f"{_count(checked.retirements, 'retirement')}"
    )
    if report.anchor is not None:
        what += f" against the anchor at seq {report.anchor.seq}"
    if report.keyed_head is not None:
        what += " and the keyed head"
    if report.valid:
        return [f"{what}: the audit log verifies"]
    count, listed = report.problem_count, report.problems
    lines = [f"{what}: the audit log does not verify: {_count(count, 'problem')}"]
    for problem in listed:
        at = "" if problem["seq"] is None else f" at seq {problem['seq']}"
        lines.append(f"  {problem['check']}{at}: {problem_text(problem)}")
    if count > len(listed):
        lines.append(f"  ... the first {len(listed)} of {count} problems are listed")
    return lines


def register(commands: Commands) -> None:
    """Add ``audit`` and its subcommands to ``commands``."""
    audit_parser = commands.add_parser("audit", help="anchor and verify the audit log's hash chain")
    audit_commands = audit_parser.add_subparsers(dest="audit_command", required=True)
    head = audit_commands.add_parser(
        "head",
        help="verify the log, then print its head (seq sha256) to keep outside the database",
    )
    head.set_defaults(handler=_head)
    verify = audit_commands.add_parser(
        "verify",
        help="verify the chain, the keyed head (with CALMON_AUDIT_KEY), every contract, gate "
        "decision and retirement against its event, and (given) an anchored head; prints the "
        "report as JSON and what was checked and every problem on stderr; exit 0 valid, "
        "1 invalid",
    )
    verify.add_argument("--expected-seq", type=int, help="seq of a head printed earlier")
    verify.add_argument("--expected-sha256", help="sha256 of that head")
    verify.set_defaults(handler=_verify)
    reseal = audit_commands.add_parser(
        "reseal",
        help="with CALMON_AUDIT_KEY: sign a new keyed head over the log as it stands (after "
        "its head was deleted or its newest events were), recorded as an audit_resealed event;"
        " prints the new head (seq sha256)",
    )
    reseal.add_argument(
        "--i-know",
        action="store_true",
        help="confirm: the log's end is taken as it is, whatever was deleted from it",
    )
    reseal.add_argument("--reason", help="why, recorded in the audit_resealed event")
    reseal.set_defaults(handler=_reseal)
