"""The commands that run calmon's processes on the configured database: ``migrate``, ``serve``
and ``refresh``; and the database and sessions every database command opens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from service.config import load_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.cli.usage import Commands
    from service.config import Settings
    from service.db.database import Database


def open_database(settings: Settings) -> Database:
    """The configured database, its sessions appending audit events under CALMON_AUDIT_KEY."""
    from service.audit.chain import AuditKeyring
    from service.audit.store import bind_keyring
    from service.db.database import Database

    db = Database(settings.database_url, commit_seconds=settings.commit_seconds)
    bind_keyring(db.sessions, AuditKeyring.from_setting(settings.audit_key))
    return db


@contextmanager
def session(settings: Settings | None = None) -> Iterator[Session]:
    """A session on the configured database; the engine is disposed after."""
    db = open_database(settings or load_settings())
    try:
        with db.session() as opened:
            yield opened
    finally:
        db.dispose()


def _migrate(_args: argparse.Namespace) -> int:
    from service.audit.store import seal
    from service.common.clock import utcnow
    from service.db.migrate import upgrade_to_head
    from service.stream.maintenance import run_pending

    settings = load_settings()
    upgrade_to_head(settings.database_url)
    with session(settings) as opened:
        for task in run_pending(opened):
            print(f"ran maintenance task {task}", file=sys.stderr)
        sealed = seal(opened, actor="cli", now=utcnow())
        if sealed:
            opened.commit()
        for line in sealed:
            print(line, file=sys.stderr)
    print("database is at the latest schema", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from service.server import serve, serve_settings

    serve(serve_settings(load_settings(), args.host, args.port, args.workers, args.threads))
    return 0


def _refresh(args: argparse.Namespace) -> int:
    from service.export.refresher import Refresher, refresh_all

    settings = load_settings()
    db = open_database(settings)
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


def register(commands: Commands) -> None:
    """Add ``migrate``, ``serve`` and ``refresh`` to ``commands``."""
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
