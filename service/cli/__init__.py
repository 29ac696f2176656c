"""The ``calmon`` command: the top-level parser and the entry point.

Each module registers its own subcommands: ``database`` (migrate, serve, refresh), ``retention``
(prune), ``audit`` and ``tokens`` work on the configured database; ``http_commands`` (gate, fit,
ingest, demo) talk to a running service through the Python client.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from service.cli import audit, database, http_commands, retention, tokens
from service.cli.usage import UsageError


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``calmon`` command; a parsed command's ``handler`` runs it."""
    parser = argparse.ArgumentParser(prog="calmon", description="Calibration monitoring service.")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (database, http_commands, retention, audit, tokens):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``calmon`` console script: the command's exit status, 2 for a usage
    error or a service that cannot be reached."""
    args = build_parser().parse_args(argv)
    from service.client import Unreachable
    from service.common.errors import CalmonError

    try:
        return int(args.handler(args))
    except (UsageError, Unreachable, CalmonError, ValueError) as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 2
