"""The ``calmon`` command: migrate, serve, refresh, token, audit, gate, fit, demo, prune."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.auth.tokens import Role
from service.calibration.vocabulary import Task
from service.config import load_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.config import Settings
    from service.db.database import Database


def _database(settings: Settings) -> Database:
    """The configured database, its sessions appending audit events under CALMON_AUDIT_KEY."""
    from service.audit.chain import AuditKeyring
    from service.audit.store import bind_keyring
    from service.db.database import Database

    db = Database(settings.database_url, commit_seconds=settings.commit_seconds)
    bind_keyring(db.sessions, AuditKeyring.from_setting(settings.audit_key))
    return db


@contextmanager
def _session(settings: Settings | None = None) -> Iterator[Session]:
    """A session on the configured database; the engine is disposed after."""
    db = _database(settings or load_settings())
    try:
        with db.session() as session:
            yield session
    finally:
        db.dispose()


def _migrate(_args: argparse.Namespace) -> int:
    from service.audit.store import seal
    from service.common.clock import utcnow
    from service.db.migrate import upgrade_to_head
    from service.stream.maintenance import run_pending

    settings = load_settings()
    upgrade_to_head(settings.database_url)
    with _session(settings) as session:
        for task in run_pending(session):
            print(f"ran maintenance task {task}", file=sys.stderr)
        sealed = seal(session, actor="cli", now=utcnow())
        if sealed:
            session.commit()
        for line in sealed:
            print(line, file=sys.stderr)
    print("database is at the latest schema", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from service.server import serve, serve_settings

    serve(serve_settings(load_settings(), args.host, args.port, args.workers, args.threads))
    return 0


def _token_create(args: argparse.Namespace) -> int:
    from service.auth.service import create_token

    with _session() as session:
        name = args.name or f"{args.role}-token"
        token = create_token(session, role=Role(args.role), name=name, actor="cli")
    print(token)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from service.auth.service import revoke_token

    with _session() as session:
        revoked = revoke_token(session, name=args.name, actor="cli")
    print(f"revoked {revoked.name} ({revoked.role})", file=sys.stderr)
    return 0


def _one_field(text: str) -> str:
    """``text`` as one tab-separated field of one line: control characters (a name stored
    before names were checked) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _token_list(_args: argparse.Namespace) -> int:
    from service.auth.token_store import list_tokens

    with _session() as session:
        tokens = list_tokens(session)
    for t in tokens:
        state = f"revoked {t.revoked_at.isoformat()}" if t.revoked_at else "live"
        name, by = _one_field(t.name), _one_field(t.created_by)
        print(f"{name}\t{t.role}\tcreated {t.created_at.isoformat()} by {by}\t{state}")
    return 0


def _refresh(args: argparse.Namespace) -> int:
    from service.export.refresher import Refresher, refresh_all

    settings = load_settings()
    db = _database(settings)
    try:
        if not args.loop:
            report = refresh_all(db, settings)
            print(
                f"refreshed {report.readings} readings of {report.models} models in "
                f"{report.seconds:.2f} s",
                file=sys.stderr,
            )
            if report.failed:
                print(f"failed: {', '.join(report.failed)}", file=sys.stderr)
                return 1
            return 0
        Refresher(db, settings).loop(at_once=True)
        return 0
    finally:
        db.dispose()


def _prune(args: argparse.Namespace) -> int:
    from service.common.clock import utcnow
    from service.stream.retention import prune
    from service.stream.windows import parse_duration

    older_than = parse_duration(args.older_than, limit=None)
    settings = load_settings()
    with _session(settings) as session:
        report = prune(session, older_than=older_than, settings=settings, now=utcnow(), actor="cli")
    counts = report.counts
    print(
        f"pruned everything before {report.cutoff.isoformat()}: {counts.predictions} predictions,"
        f" {counts.labels} labels; contracts, aggregates, readings and the audit log are kept"
    )
    expired = sum(report.pending_expired.values())
    if expired:
        print(f"expired {expired} labels that waited too long for their prediction")
    return 0


def _audit_head(_args: argparse.Namespace) -> int:
    from service.audit.service import audit_head
    from service.common.errors import Conflict
    from service.contracts.service import stored_contracts

    try:
        with _session() as session:
            head = audit_head(session, contracts=stored_contracts)
    except Conflict as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 1
    if head is None:
        print("calmon: the audit chain is empty: nothing to anchor yet", file=sys.stderr)
        return 1
    print(f"{head['seq']} {head['sha256']}")
    print(
        f"the log verifies; keep this head outside the database, then check it later with "
        f"`calmon audit verify --expected-seq {head['seq']} --expected-sha256 {head['sha256']}`",
        file=sys.stderr,
    )
    return 0


def _audit_verify(args: argparse.Namespace) -> int:
    import re

    from service.audit.chain import Anchor
    from service.audit.service import verify_audit
    from service.contracts.service import stored_contracts

    if (args.expected_seq is None) != (args.expected_sha256 is None):
        raise UsageError("give --expected-seq and --expected-sha256 together")
    anchor = None
    if args.expected_seq is not None:
        if args.expected_seq < 1 or not re.fullmatch(r"[0-9a-f]{64}", args.expected_sha256):
            raise UsageError("--expected-seq is >= 1 and --expected-sha256 is 64 lower-case hex")
        anchor = Anchor(args.expected_seq, args.expected_sha256)
    with _session() as session:
        report = verify_audit(session, anchor, contracts=stored_contracts)
    print(json.dumps(report, indent=2))
    for line in _verification_summary(report):
        print(line, file=sys.stderr)
    return 0 if report["valid"] else 1


def _audit_reseal(args: argparse.Namespace) -> int:
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
        with _session(settings) as session:
            resealed = reseal(session, actor="cli", now=utcnow(), reason=args.reason)
            session.commit()
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


def _verification_summary(report: dict[str, Any]) -> list[str]:
    """What was checked, and every listed problem, one per line (for stderr)."""
    from service.audit.service import problem_text

    checked = report["checked"]
    what = (
        f"checked {_count(checked['events'], 'event')}, "
        f"{_count(checked['contracts'], 'contract')}, "
        f"{_count(checked['decisions'], 'gate decision')} and "
        f"{_count(checked['retirements'], 'retirement')}"
    )
    if report["anchor"] is not None:
        what += f" against the anchor at seq {report['anchor']['seq']}"
    if report["keyed_head"] is not None:
        what += " and the keyed head"
    if report["valid"]:
        return [f"{what}: the audit log verifies"]
    count, listed = report["problem_count"], report["problems"]
    lines = [f"{what}: the audit log does not verify: {_count(count, 'problem')}"]
    for problem in listed:
        at = "" if problem["seq"] is None else f" at seq {problem['seq']}"
        lines.append(f"  {problem['check']}{at}: {problem_text(problem)}")
    if count > len(listed):
        lines.append(f"  ... the first {len(listed)} of {count} problems are listed")
    return lines


def _token(args: argparse.Namespace) -> str:
    token = args.token or load_settings().token
    if not token:
        raise UsageError("give --token or set CALMON_TOKEN")
    return str(token)


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read the {what} {path}: {exc}") from exc


def _gate(args: argparse.Namespace) -> int:
    from service.client import Calmon, RequestFailed
    from service.remote import error_text, gate_report

    policy = _read_json(args.policy, "policy file") if args.policy else None
    client = Calmon(args.url, _token(args))
    try:
        decision = client.gate(args.contract, policy)
    except RequestFailed as failed:
        print(error_text(failed.reply), file=sys.stderr)
        return 2
    finally:
        client.close()
    print(gate_report(decision.raw))
    return 0 if decision.passed else 1


def _fit(args: argparse.Namespace) -> int:
    """Read the sets here, then have the service fit and measure them (``/v1/contracts/fit``),
    so the gate sees a baseline calmon measured; ``--local`` fits here and registers the result
    (``/v1/contracts``): a supplied baseline."""
    from service.common.errors import ErrorCollector
    from service.contracts.datafiles import read_labeled_set
    from service.contracts.model import method_problem
    from service.contracts.requests import parse_spec_fields
    from service.remote import call, error_text

    spec = _read_json(args.spec, "contract spec")
    errors = ErrorCollector()
    fields = parse_spec_fields(spec, errors)
    problem = method_problem(args.method, fields["task"])
    if problem is not None:
        errors.add("method", problem)
    if errors:
        raise UsageError(
            "the contract spec is invalid: "
            + "; ".join(f"{d.field}: {d.message}" for d in errors.details)
        )
    sets = {}
    for name in ("fit", "eval"):
        print(f"reading the {name} set {getattr(args, name)}", file=sys.stderr)
        sets[name] = read_labeled_set(
            Path(getattr(args, name)), task=fields["task"], classes=fields["classes"]
        )
    if args.local:
        path, body = "/v1/contracts", _locally_fitted(fields, args.method, sets)
    else:
        key = "logits" if fields["task"] == Task.MULTICLASS else "scores"
        path = "/v1/contracts/fit"
        body = {
            **spec,
            "method": args.method,
            **{
                name: {key: data.inputs.tolist(), "labels": data.labels.tolist()}
                for name, data in sets.items()
            },
        }
        print("sending the sets to the service to fit and measure", file=sys.stderr)
    status, reply = call(args.url, _token(args), "POST", path, body)
    if status != 201:
        print(error_text(reply), file=sys.stderr)
        if status == 413:
            print(
                "the sets are larger than the service accepts (CALMON_MAX_BODY_BYTES): raise "
                "it, or fit here with --local (the gate then sees a supplied baseline)",
                file=sys.stderr,
            )
        return 2
    for warning in reply.get("warnings") or []:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        json.dumps(
            {
                "id": reply["id"],
                "version": reply["version"],
                "calibrator": reply["calibrator"],
                "content_sha256": reply["content_sha256"],
                "baseline_source": "supplied" if args.local else "measured",
            },
            indent=2,
        )
    )
    return 0


def _locally_fitted(fields: dict[str, Any], method: str, sets: dict[str, Any]) -> dict[str, Any]:
    """A ``POST /v1/contracts`` body: the contract fitted and measured on this machine."""
    from service.contracts.fitting import fit_contract_spec
    from service.contracts.requests import FitRequest

    return fit_contract_spec(FitRequest(fields, method, sets["fit"], sets["eval"])).to_dict()


def _ingest(args: argparse.Namespace) -> int:
    """Send a CSV, Parquet or Arrow file of predictions or labels through the client; exit 0
    when every row was acknowledged, 1 when the service rejected some, 2 when some could not be
    delivered (rerun: rows already stored count as duplicates)."""
    from service.client import Calmon
    from service.client.backfill import UnreadableFile, describe, ingest_file

    client = Calmon(args.url, _token(args), model=args.model, batch_size=args.batch)
    try:
        report = ingest_file(client, args.kind, Path(args.file), wait=args.wait)
    except UnreadableFile as exc:
        client.close(timeout=0)
        raise UsageError(str(exc)) from None
    print(describe(report, args.kind))
    if report.rejected:
        print(f"calmon ingest: the service rejected rows: {report.last_error}", file=sys.stderr)
        return 1
    if report.dropped or report.sent < report.read:
        print(
            f"calmon ingest: {report.read - report.sent:,} rows were not delivered"
            f" ({report.last_error}); run the same command again",
            file=sys.stderr,
        )
        return 2
    return 0


def _demo(args: argparse.Namespace) -> int:
    from service.demo import DemoOptions, run_demo

    options = DemoOptions(
        args.url, _token(args), args.model, args.hours, args.rate, args.seed, args.wait
    )
    return run_demo(options)


class UsageError(Exception):
    """Bad command-line input: exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calmon", description="Calibration monitoring service.")
    commands = parser.add_subparsers(dest="command", required=True)

    migrate = commands.add_parser("migrate", help="upgrade the database schema to the latest")
    migrate.set_defaults(handler=_migrate)

    serve = commands.add_parser("serve", help="serve the HTTP API with gunicorn")
    serve.add_argument("--host", help="default: the host of CALMON_BIND")
    serve.add_argument("--port", type=int, help="default: the port of CALMON_BIND")
    serve.add_argument("--workers", type=int, help="default: WEB_CONCURRENCY")
    serve.add_argument(
        "--threads", type=int, help="threads per worker (gthread); default: CALMON_THREADS"
    )
    serve.set_defaults(handler=_serve)

    refresh = commands.add_parser(
        "refresh", help="recompute the stored readings behind the Prometheus gauges"
    )
    refresh.add_argument(
        "--loop",
        action="store_true",
        help="keep refreshing every CALMON_REFRESH_SECONDS (a worker process)",
    )
    refresh.set_defaults(handler=_refresh)

    gate = commands.add_parser(
        "gate", help="ask the review gate about a contract; exit 0 on pass, 1 on fail"
    )
    gate.add_argument("--url", required=True, help="the calmon service, e.g. http://host:8000")
    gate.add_argument("--token", help="a gate or admin token (default: $CALMON_TOKEN)")
    gate.add_argument("--contract", required=True, help="the contract id")
    gate.add_argument("--policy", help="a JSON file with the gate policy")
    gate.set_defaults(handler=_gate)

    fit = commands.add_parser(
        "fit",
        help="read CSV/NPZ files and have the service fit the calibrator, measure the baseline "
        "and register the contract",
    )
    fit.add_argument("--url", required=True)
    fit.add_argument("--token", help="an admin token (default: $CALMON_TOKEN)")
    fit.add_argument(
        "--spec",
        required=True,
        help="JSON with the contract fields (model, checkpoint, task, classes, ...)",
    )
    fit.add_argument("--fit", required=True, help="the fit set (.csv or .npz)")
    fit.add_argument("--eval", required=True, help="the held-out eval set (.csv or .npz)")
    fit.add_argument(
        "--method",
        choices=[
            "temperature",
            "platt",
            "beta",
            "isotonic",
            "histogram",
            "vector",
            "matrix",
            "auto",
        ],
        default="temperature",
    )
    fit.add_argument(
        "--local",
        action="store_true",
        help="fit and measure here and register the result: for sets larger than the service "
        "accepts; the gate then sees a baseline supplied by the registrant",
    )
    fit.set_defaults(handler=_fit)

    ingest = commands.add_parser(
        "ingest",
        help="send a CSV, Parquet or Arrow file of predictions or labels (rerunnable: ingest is "
        "idempotent by id)",
    )
    ingest.add_argument("kind", choices=["predictions", "labels"])
    ingest.add_argument("file", help="a .csv, .parquet or .arrow file")
    ingest.add_argument("--url", required=True, help="the calmon service, e.g. http://host:8000")
    ingest.add_argument("--token", help="an ingest or admin token (default: $CALMON_TOKEN)")
    ingest.add_argument("--model", required=True, help="the model the rows belong to")
    ingest.add_argument(
        "--batch", type=int, default=10_000, help="rows per request (default 10,000)"
    )
    ingest.add_argument(
        "--wait",
        type=float,
        default=600.0,
        help="seconds to keep retrying at the end while the service is unreachable (default 600)",
    )
    ingest.set_defaults(handler=_ingest)

    demo = commands.add_parser(
        "demo", help="stream a realistic scenario (one cohort drifts) into a running service"
    )
    demo.add_argument("--url", required=True, help="the calmon service, e.g. http://host:8000")
    demo.add_argument("--token", help="an admin token (default: $CALMON_TOKEN)")
    demo.add_argument("--model", default="demo", help="the model name to use (default: demo)")
    demo.add_argument(
        "--hours",
        type=float,
        default=12.0,
        help="hours of event time ending now, 8-168 (default 12)",
    )
    demo.add_argument(
        "--rate", type=float, default=1500.0, help="predictions per simulated hour (default 1500)"
    )
    demo.add_argument("--seed", type=int, default=7, help="the scenario's random seed")
    demo.add_argument(
        "--wait",
        type=float,
        default=90.0,
        help="seconds to wait for the refreshed Prometheus gauges at the end (0: don't)",
    )
    demo.set_defaults(handler=_demo)

    prune = commands.add_parser(
        "prune",
        help="delete predictions and labels older than a duration; keeps"
        " contracts, aggregates, readings and the audit log",
    )
    prune.add_argument(
        "--older-than", required=True, help="e.g. 30d; at least the longest CALMON_WINDOWS"
    )
    prune.set_defaults(handler=_prune)

    audit_parser = commands.add_parser("audit", help="anchor and verify the audit log's hash chain")
    audit_commands = audit_parser.add_subparsers(dest="audit_command", required=True)
    head = audit_commands.add_parser(
        "head",
        help="verify the log, then print its head (seq sha256) to keep outside the database",
    )
    head.set_defaults(handler=_audit_head)
    verify = audit_commands.add_parser(
        "verify",
        help="verify the chain, the keyed head (with CALMON_AUDIT_KEY), every contract, gate "
        "decision and retirement against its event, and (given) an anchored head; prints the "
        "report as JSON and what was checked and every problem on stderr; exit 0 valid, "
        "1 invalid",
    )
    verify.add_argument("--expected-seq", type=int, help="seq of a head printed earlier")
    verify.add_argument("--expected-sha256", help="sha256 of that head")
    verify.set_defaults(handler=_audit_verify)
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
    reseal.set_defaults(handler=_audit_reseal)

    token = commands.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token; prints it alone on stdout")
    create.add_argument("--role", required=True, choices=[r.value for r in Role])
    create.add_argument("--name", help="a unique name shown in audit records (default ROLE-token)")
    create.set_defaults(handler=_token_create)
    revoke = token_commands.add_parser("revoke", help="revoke a token by name; it stops at once")
    revoke.add_argument("--name", required=True)
    revoke.set_defaults(handler=_token_revoke)
    listing = token_commands.add_parser("list", help="list tokens (names and roles, never secrets)")
    listing.set_defaults(handler=_token_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``calmon`` console script."""
    args = build_parser().parse_args(argv)
    from service.client import Unreachable
    from service.common.errors import CalmonError
    from service.remote import RemoteError

    try:
        return int(args.handler(args))
    except (UsageError, RemoteError, Unreachable, CalmonError, ValueError) as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
