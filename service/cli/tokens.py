"""``calmon token create|revoke|list``: the API tokens, stored hashed in the database."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from service.auth.tokens import Role
from service.cli.database import session

if TYPE_CHECKING:
    from service.cli.usage import Commands


def _create(args: argparse.Namespace) -> int:
    from service.auth.service import create_token

    with session() as opened:
        name = args.name or f"{args.role}-token"
        token = create_token(opened, role=Role(args.role), name=name, actor="cli")
    print(token)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from service.auth.service import revoke_token

    with session() as opened:
        revoked = revoke_token(opened, name=args.name, actor="cli")
    print(f"revoked {revoked.name} ({revoked.role})", file=sys.stderr)
    return 0


def _one_field(text: str) -> str:
    """``text`` as one tab-separated field of one line: control characters (a name stored
    before names were checked) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _list(_args: argparse.Namespace) -> int:
    from service.auth.token_store import list_tokens

    with session() as opened:
        tokens = list_tokens(opened)
    for t in tokens:
        state = f"revoked {t.revoked_at.isoformat()}" if t.revoked_at else "live"
        name, by = _one_field(t.name), _one_field(t.created_by)
        print(f"{name}\t{t.role}\tcreated {t.created_at.isoformat()} by {by}\t{state}")
    return 0


def register(commands: Commands) -> None:
    """Add ``token`` and its subcommands to ``commands``."""
    token = commands.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token; prints it alone on stdout")
    create.add_argument("--role", required=True, choices=[r.value for r in Role])
    create.add_argument("--name", help="a unique name shown in audit records (default ROLE-token)")
    create.set_defaults(handler=_create)
    revoke = token_commands.add_parser("revoke", help="revoke a token by name; it stops at once")
    revoke.add_argument("--name", required=True)
    revoke.set_defaults(handler=_revoke)
    listing = token_commands.add_parser("list", help="list tokens (names and roles, never secrets)")
    listing.set_defaults(handler=_list)
