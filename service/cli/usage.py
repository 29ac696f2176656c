"""What every command module of ``calmon`` shares: the usage error and reading an input file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    #: The ``add_subparsers`` object each command module's ``register`` adds its commands to.
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


class UsageError(Exception):
    """Bad command-line input: exit status 2."""


def read_json(path: str, what: str) -> Any:
    """The JSON document in the file ``path``; a ``UsageError`` naming ``what`` when it cannot
    be read or parsed."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read the {what} {path}: {exc}") from exc
