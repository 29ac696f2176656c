"""The commands that talk to a running calmon over HTTP, through the Python client (``Calmon``):
``gate``, ``fit``, ``ingest`` and ``demo``. They share the options ``--url`` and ``--token``
(one parent parser); the token defaults to ``CALMON_TOKEN``."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from service.cli.usage import UsageError, read_json
from service.config import load_settings

if TYPE_CHECKING:
    from service.cli.usage import Commands

#: Seconds ``calmon fit`` waits for the service's reply: it fits and measures both sets first.
FIT_SECONDS = 120.0
METHODS = ("temperature", "platt", "beta", "isotonic", "histogram", "vector", "matrix", "auto")


def _url(args: argparse.Namespace) -> str:
    url = args.url or load_settings().url
    if not url:
        raise UsageError("give --url or set CALMON_URL")
    return str(url)


def _token(args: argparse.Namespace) -> str:
    token = args.token or load_settings().token
    if not token:
        raise UsageError("give --token or set CALMON_TOKEN")
    return str(token)


Handler = Callable[[argparse.Namespace], int]

#: What ``calmon fit`` adds to a refusal of its request, by HTTP status.
_FIT_HINTS = {
    413: "the sets are larger than the service accepts (CALMON_MAX_BODY_BYTES): raise "
    "it, or fit here with --local (the gate then sees a supplied baseline)",
}


def _reports_refusal(hints: Mapping[int, str] | None = None) -> Callable[[Handler], Handler]:
    """Decorate a handler so that a request the service refuses (``RequestFailed``) ends it
    with exit status 2, the service's error and the hint ``hints`` holds for its HTTP status
    on stderr."""

    def decorator(handler: Handler) -> Handler:
        @wraps(handler)
        def run(args: argparse.Namespace) -> int:
            from service.client import RequestFailed
            from service.client.reports import error_text

            try:
                return handler(args)
            except RequestFailed as failed:
                print(error_text(failed.reply), file=sys.stderr)
                hint = (hints or {}).get(failed.status)
                if hint is not None:
                    print(hint, file=sys.stderr)
                return 2

        return run

    return decorator


@_reports_refusal()
def _gate(args: argparse.Namespace) -> int:
    from service.client import Calmon
    from service.client.reports import gate_report

    policy = read_json(args.policy, "policy file") if args.policy else None
    with Calmon(_url(args), _token(args)) as client:
        decision = client.gate(args.contract, policy)
    print(gate_report(decision.raw))
    return 0 if decision.passed else 1


@_reports_refusal(_FIT_HINTS)
def _fit(args: argparse.Namespace) -> int:
    """Read the sets here, then have the service fit and measure them (``/v1/contracts/fit``),
    so the gate sees a baseline calmon measured; ``--local`` fits here and registers the result
    (``/v1/contracts``): a supplied baseline."""
    from service.calibration.vocabulary import Task
    from service.cli.datafiles import read_labeled_set
    from service.client import Calmon
    from service.common.errors import ErrorCollector
    from service.contracts.model import method_problem
    from service.contracts.requests import parse_spec_fields

    spec = read_json(args.spec, "contract spec")
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
        body = _locally_fitted(fields, args.method, sets)
    else:
        key = "logits" if fields["task"] == Task.MULTICLASS else "scores"
        body = {
            **spec,
            "method": args.method,
            **{
                name: {key: data.inputs.tolist(), "labels": data.labels.tolist()}
                for name, data in sets.items()
            },
        }
        print("sending the sets to the service to fit and measure", file=sys.stderr)
    key = fit_key(spec, args.method, args.local, sets)
    with Calmon(_url(args), _token(args), timeout=FIT_SECONDS) as client:
        newest = client.contracts(fields["model"], limit=1)
        register = client.register if args.local else client.fit
        contract = register(body, idempotency_key=key)
    stored_before = bool(newest) and contract.version <= newest[0].version
    if stored_before:
        print(
            f"the same spec, method and sets were registered before: contract version "
            f"{contract.version} of {contract.model}, returned as stored (no new version)",
            file=sys.stderr,
        )
    for warning in contract.warnings:
        print(f"warning [{warning['code']}]: {warning['message']}", file=sys.stderr)
    print(
        json.dumps(
            {
                "id": contract.id,
                "version": contract.version,
                "calibrator": contract.raw["calibrator"],
                "content_sha256": contract.content_sha256,
                "baseline_source": "supplied" if args.local else "measured",
                "stored_before": stored_before,
            },
            indent=2,
        )
    )
    return 0


def fit_key(spec: Any, method: str, local: bool, sets: dict[str, Any]) -> str:
    """The ``Idempotency-Key`` of a ``calmon fit``: a digest of what it was given (the spec as
    JSON, the method, ``--local``, every value of the labeled sets), so the same content sent
    again gets the contract registered the first time instead of a new version."""
    digest = hashlib.sha256()
    head = {"spec": spec, "method": method, "local": local}
    digest.update(json.dumps(head, sort_keys=True, separators=(",", ":")).encode())
    for name in ("fit", "eval"):
        for array in (sets[name].inputs, sets[name].labels):
            values = np.ascontiguousarray(array, dtype="<f8")
            digest.update(f"{name}:{values.shape}".encode())
            digest.update(values.tobytes())
    return f"calmon-fit-{digest.hexdigest()}"


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

    client = Calmon(_url(args), _token(args), model=args.model, batch_size=args.batch)
    try:
        report = ingest_file(
            client, args.kind, Path(args.file), wait=args.wait, assume_utc=args.assume_utc
        )
    except UnreadableFile as exc:
        client.close(timeout=0)
        raise UsageError(str(exc)) from None
    print(describe(report, args.kind))
    if report.rejected:
        if report.last_rejection is None:
            print(f"calmon ingest: rows were refused: {report.last_error}", file=sys.stderr)
        else:
            print(
                f"calmon ingest: the service rejected {report.rejected:,} rows; its reply to "
                "the last rejected batch:",
                file=sys.stderr,
            )
            print(json.dumps(report.last_rejection, indent=2), file=sys.stderr)
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
        _url(args), _token(args), args.model, args.hours, args.rate, args.seed, args.wait
    )
    return run_demo(options)


def _service_options() -> argparse.ArgumentParser:
    """The parent parser of every HTTP command: where the service is, and the bearer token."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--url", help="the calmon service, e.g. http://host:8000 (default: $CALMON_URL)"
    )
    options.add_argument(
        "--token",
        help="a token of the role the command names (default: $CALMON_TOKEN)",
    )
    return options


def register(commands: Commands) -> None:
    """Add ``gate``, ``fit``, ``ingest`` and ``demo`` to ``commands``."""
    service = [_service_options()]

    gate = commands.add_parser(
        "gate",
        parents=service,
        help="ask the review gate about a contract; exit 0 on pass, 1 on fail",
        description="Ask the review gate about a contract (a gate or admin token); exit 0 on "
        "pass, 1 on fail.",
    )
    gate.add_argument("--contract", required=True, help="the contract id")
    gate.add_argument("--policy", help="a JSON file with the gate policy")
    gate.set_defaults(handler=_gate)

    fit = commands.add_parser(
        "fit",
        parents=service,
        help="read CSV, Parquet, Arrow or NPZ files and have the service fit the calibrator, "
        "measure the baseline and register the contract (the same content again: the stored "
        "contract)",
        description="Read CSV, Parquet, Arrow or NPZ files (the columns of a predictions file "
        "and a label column) and have the service fit the calibrator, measure the baseline and "
        "register the contract (an admin token). The same spec, method and sets again return "
        "the contract stored the first time, and register no new version.",
    )
    fit.add_argument(
        "--spec",
        required=True,
        help="JSON with the contract fields (model, checkpoint, task, classes, ...)",
    )
    fit.add_argument("--fit", required=True, help="the fit set (.csv, .parquet, .arrow or .npz)")
    fit.add_argument(
        "--eval", required=True, help="the held-out eval set (.csv, .parquet, .arrow or .npz)"
    )
    fit.add_argument("--method", choices=METHODS, default="temperature")
    fit.add_argument(
        "--local",
        action="store_true",
        help="fit and measure here and register the result: for sets larger than the service "
        "accepts; the gate then sees a baseline supplied by the registrant",
    )
    fit.set_defaults(handler=_fit)

    ingest = commands.add_parser(
        "ingest",
        parents=service,
        help="send a CSV, Parquet or Arrow file of predictions or labels (rerunnable: ingest is "
        "idempotent by id)",
        description="Send a CSV, Parquet or Arrow file of predictions or labels (an ingest or "
        "admin token); rerunnable: ingest is idempotent by id.",
    )
    ingest.add_argument("kind", choices=["predictions", "labels"])
    ingest.add_argument("file", help="a .csv, .parquet or .arrow file")
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
    ingest.add_argument(
        "--assume-utc",
        action="store_true",
        help="read times without a zone (naive timestamps, text without an offset) as UTC",
    )
    ingest.set_defaults(handler=_ingest)

    demo = commands.add_parser(
        "demo",
        parents=service,
        help="stream a realistic scenario (one cohort drifts) into a running service",
        description="Stream a realistic scenario (one cohort drifts) into a running service "
        "(an admin token).",
    )
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
