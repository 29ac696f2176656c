"""The commands that run calmon's processes on the configured database: ``migrate``, ``serve``
and ``refresh``; and the database and sessions every database command opens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.usage import UsageError
from service.config import load_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.cli.usage import Commands
    from service.config import Settings
    from service.db.database import Database


class NoSchema(UsageError):
    """The configured database holds no calmon schema (exit status 2)."""


def shown_url(url: str) -> str:
    """``url`` as it may be printed: its password hidden."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None for another backend, memory or a ``file:`` URI)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.query.get("uri"):
        return None
    if not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def _cannot_open(url: str, exc: Exception) -> UsageError:
    """The database at ``url`` could not be opened (``exc``, SQLAlchemy's OperationalError)."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return UsageError(f"cannot open the database at {shown_url(url)}: {reason}")


def _no_schema(url: str) -> NoSchema:
    return NoSchema(
        f"no calmon schema at {shown_url(url)}; run `calmon migrate` or set CALMON_DATABASE_URL"
    )


def open_database(settings: Settings, *, migrated: bool = True) -> Database:
    """The configured database, its sessions appending audit events under CALMON_AUDIT_KEY.

    With ``migrated`` (every command but ``migrate``), a database without calmon's schema is a
    ``NoSchema`` naming it, and a SQLite file that does not exist is not created."""
    from sqlalchemy.exc import OperationalError

    from service.audit.chain import AuditKeyring
    from service.audit.store import bind_keyring
    from service.db.database import Database
    from service.db.migrate import current_revisions

    url = settings.database_url
    file = _sqlite_file(url)
    if migrated and file is not None and not file.is_file():
        raise _no_schema(url)
    db = Database(url, commit_seconds=settings.commit_seconds)
    try:
        revisions = current_revisions(db.engine) if migrated else ()
    except OperationalError as exc:
        db.dispose()
        raise _cannot_open(url, exc) from None
    if migrated and not revisions:
        db.dispose()
        raise _no_schema(url)
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
    from sqlalchemy.exc import OperationalError

    from service.audit.store import seal
    from service.common.clock import utcnow
    from service.db.migrate import upgrade_to_head
    from service.stream.maintenance import run_pending

    settings = load_settings()
    print(f"migrating {shown_url(settings.database_url)}", file=sys.stderr)
    try:
        applied = upgrade_to_head(settings.database_url)
    except OperationalError as exc:
        raise _cannot_open(settings.database_url, exc) from None
    for revision in applied:
        print(f"applied {revision}", file=sys.stderr)
    with session(settings) as opened:
        for task in run_pending(opened):
            print(f"ran maintenance task {task}", file=sys.stderr)
        sealed = seal(opened, actor="cli", now=utcnow())
        if sealed:
            opened.commit()
        for line in sealed:
            print(line, file=sys.stderr)
    print(
        f"{shown_url(settings.database_url)} is at the latest schema"
        + (
            f" ({len(applied)} revision{'' if len(applied) == 1 else 's'} applied)"
            if applied
            else " (nothing to apply)"
        ),
        file=sys.stderr,
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Serve the API; a database without calmon's schema is refused before gunicorn starts.

    A database that cannot be reached yet is served anyway (``/readyz`` reports it), so a
    service may start before its database does."""
    from service.server import serve, serve_settings

    settings = load_settings()
    try:
        open_database(settings).dispose()
    except NoSchema:
        raise
    except UsageError as exc:
        print(f"calmon: {exc}; serving, /readyz reports the database", file=sys.stderr)
    serve(serve_settings(settings, args.host, args.port, args.workers, args.threads))
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
