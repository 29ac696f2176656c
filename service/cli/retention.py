"""``calmon prune``: delete the predictions and labels older than a duration."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.cli.database import session
from service.config import load_settings

if TYPE_CHECKING:
    from service.cli.usage import Commands


def _prune(args: argparse.Namespace) -> int:
    from service.common.clock import utcnow
    from service.stream.retention import prune
    from service.stream.windows import parse_duration

    older_than = parse_duration(args.older_than, limit=None)
    settings = load_settings()
    with session(settings) as opened:
        report = prune(opened, older_than=older_than, settings=settings, now=utcnow(), actor="cli")
    counts = report.counts
    print(
        f"pruned everything before {report.cutoff.isoformat()}: {counts.predictions} predictions,"
        f" {counts.labels} labels; contracts, aggregates, readings and the audit log are kept"
    )
    expired = sum(report.pending_expired.values())
    if expired:
        print(f"expired {expired} labels that waited too long for their prediction")
    return 0


def register(commands: Commands) -> None:
    """Add ``prune`` to ``commands``."""
    prune = commands.add_parser(
        "prune",
        help="delete predictions and labels older than a duration; keeps"
        " contracts, aggregates, readings and the audit log",
    )
    prune.add_argument(
        "--older-than", required=True, help="e.g. 30d; at least the longest CALMON_WINDOWS"
    )
    prune.set_defaults(handler=_prune)
