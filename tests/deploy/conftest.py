"""Fixtures and helpers for checking the deployment files against the code they deploy.

The deployment files name things the code defines: ``calmon`` subcommands, ``CALMON_*``
settings, HTTP routes. These helpers ask the code itself (``build_parser()``, ``Settings``, the
app's URL map), so a renamed route or setting fails the deployment tests instead of a rollout.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from service import create_app
from service.cli import build_parser
from service.config import environment_names
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from tests.deploy import ROOT

#: Every environment variable ``service/config.py`` reads.
SETTINGS_ENV = environment_names()


def variables_read_by_the_code() -> frozenset[str]:
    """``CALMON_*`` names that occur as string literals in the service package."""
    names: set[str] = set()
    for path in (ROOT / "service").rglob("*.py"):
        names.update(re.findall(r"[\"'](CALMON_[A-Z0-9_]+)[\"']", path.read_text()))
    return frozenset(names)


def parse_calmon(command: list[str]) -> argparse.Namespace:
    """Parse a container command as ``calmon``'s CLI does; fail the test if it does not parse."""
    assert command and command[0] == "calmon", f"not a calmon command: {command}"
    try:
        return build_parser().parse_args(command[1:])
    except SystemExit as exc:  # argparse's way of rejecting; its message went to stderr
        pytest.fail(f"`{' '.join(command)}` is not a valid calmon command (exit {exc.code})")


def subcommand(args: argparse.Namespace) -> str:
    """The subcommand a parsed ``calmon`` command runs (``serve``, ``migrate``, ...)."""
    return str(args.command)


@pytest.fixture(scope="session")
def calmon_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """The real app on a migrated SQLite file, for its routes and open endpoints."""
    url = f"sqlite:///{tmp_path_factory.mktemp('deploy-db') / 'calmon.db'}"
    upgrade_to_head(url)
    app = create_app({"database_url": url, "refresh_in_service": False})
    try:
        yield app
    finally:
        database: Database = app.extensions["calmon.database"]
        database.dispose()


@pytest.fixture(scope="session")
def routes(calmon_app: Flask) -> frozenset[str]:
    """The URL rules the app serves (``/healthz``, ``/v1/contracts/<contract_id>``...)."""
    return frozenset(rule.rule for rule in calmon_app.url_map.iter_rules())


def repo_path(relative: str) -> Path:
    """A path of the repository from a path written relative to its root (``./deploy/...``)."""
    return (ROOT / relative).resolve()
