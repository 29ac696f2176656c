"""The ``calmon`` command: migrate, serve, token."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from service.auth import Role
from service.config import load_settings


def _migrate(_args: argparse.Namespace) -> int:
    from service.storage.migrate import upgrade_to_head

    settings = load_settings()
    upgrade_to_head(settings.database_url)
    print("database is at the latest schema", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from service.server import serve

    serve(host=args.host, port=args.port, workers=args.workers, threads=args.threads)
    return 0


def _token_create(args: argparse.Namespace) -> int:
    from service.operations import create_token
    from service.storage.database import Database

    db = Database(load_settings().database_url)
    try:
        with db.session() as session:
            name = args.name or f"{args.role}-token"
            token = create_token(session, role=Role(args.role), name=name, actor="cli")
    finally:
        db.dispose()
    print(token)
    return 0


def _refresh(args: argparse.Namespace) -> int:
    import time

    from service.refresh import Refresher, refresh_all
    from service.storage.database import Database

    settings = load_settings()
    db = Database(settings.database_url)
    try:
        if not args.loop:
            report = refresh_all(db, settings)
            print(
                f"refreshed {report.readings} readings of {report.models} models in "
                f"{report.seconds:.2f} s",
                file=sys.stderr,
            )
            return 0
        refresher = Refresher(db, settings)
        while True:
            refresher.run_once()
            time.sleep(settings.refresh_seconds)
    finally:
        db.dispose()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calmon", description="Calibration monitoring service.")
    commands = parser.add_subparsers(dest="command", required=True)

    migrate = commands.add_parser("migrate", help="upgrade the database schema to the latest")
    migrate.set_defaults(handler=_migrate)

    serve = commands.add_parser("serve", help="serve the HTTP API with gunicorn")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=2)
    serve.add_argument("--threads", type=int, default=4, help="threads per worker (gthread)")
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

    token = commands.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token; prints it alone on stdout")
    create.add_argument("--role", required=True, choices=[r.value for r in Role])
    create.add_argument("--name", help="a unique name shown in audit records (default ROLE-token)")
    create.set_defaults(handler=_token_create)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``calmon`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ValueError as exc:
        print(f"calmon: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
