"""The ``calmon`` command: the top-level parser and the entry point.

Each module registers its own subcommands: ``database`` (migrate, serve, refresh), ``retention``
(prune), ``audit`` and ``tokens`` work on the configured database; ``http_commands`` (gate, fit,
ingest, demo) talk to a running service through the Python client.

The parser and the client's commands import nothing of the server, so ``calmon ingest`` and
``calmon gate`` run where calmon is installed without its ``server`` extra; a command that needs
the server's dependencies says which extra to install instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

from service.cli import audit, database, http_commands, retention, tokens
from service.cli.usage import UsageError
from service.client import Unreachable
from service.common.errors import CalmonError

#: The distribution ``calmon --version`` reports.
DISTRIBUTION = "calmon"

#: Top-level modules of the ``server`` and ``postgresql`` extras (pyproject.toml), as imported.
SERVER_MODULES = frozenset(
    {"flask", "werkzeug", "scipy", "sqlalchemy", "alembic", "prometheus_client", "gunicorn"}
    | {"orjson", "pydantic", "pydantic_core"}
)


def version() -> str:
    """The installed calmon's version (``unknown`` for a source tree that was not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``calmon`` command; a parsed command's ``handler`` runs it."""
    parser = argparse.ArgumentParser(prog="calmon", description="Calibration monitoring service.")
    parser.add_argument("--version", action="version", version=f"calmon {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (database, http_commands, retention, audit, tokens):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``calmon`` console script: the command's exit status, 2 for a usage
    error, a service that cannot be reached, a database without calmon's schema or missing
    dependencies."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (UsageError, Unreachable, CalmonError, ValueError) as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in SERVER_MODULES:
            raise
        print(
            f"calmon: `calmon {args.command}` needs calmon's server dependencies ({exc}): "
            "install calmon with its server extra (`pip install '.[server]'` in a checkout)",
            file=sys.stderr,
        )
        return 2
