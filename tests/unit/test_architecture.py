"""The import rule of docs/architecture.md, checked on the source: what each package may import.

Every ``import`` and ``from ... import`` of every module under ``service/`` is read with ``ast``
(imports inside functions and ``TYPE_CHECKING`` blocks included) and attributed to a *unit*: a
subpackage (``service/stream/`` is ``stream``) or a top-level module (``service/server.py``
is ``server``; ``service/__init__.py`` is ``__init__``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"

KERNEL = frozenset({"common", "config", "logging"})
#: unit -> the other units it may import (kernel units import nothing of calmon).
ALLOWED: dict[str, frozenset[str]] = {
    "calibration": frozenset(),
    "common": frozenset(),
    "config": frozenset(),
    "logging": frozenset(),
    "client": frozenset(),
    "db": frozenset(),
    "audit": KERNEL | {"db"},
    "auth": KERNEL | {"db", "audit"},
    "contracts": KERNEL | {"calibration", "db", "audit"},
    "gate": KERNEL | {"calibration", "db", "audit", "contracts"},
    "stream": KERNEL | {"calibration", "db", "audit", "contracts"},
    "export": KERNEL | {"calibration", "db", "audit", "contracts", "stream"},
    "demo": KERNEL | {"client"},
    "web": KERNEL | {"calibration", "db", "audit", "auth", "contracts", "gate", "stream", "export"},
    "__init__": frozenset({"config", "web"}),
    "server": frozenset({"__init__", "config"}),
    "cli": KERNEL
    | {"calibration", "db", "audit", "auth", "contracts", "gate", "stream", "export"}
    | {"demo", "client", "server"},
}
#: Third-party libraries of the edge: only these units may import them.
EDGE_LIBRARIES = {
    "flask": frozenset({"web", "__init__"}),
    "werkzeug": frozenset({"web"}),
    "argparse": frozenset({"cli"}),
    "gunicorn": frozenset({"server"}),
}
#: The numeric core stays free of the service's infrastructure.
CORE_FORBIDDEN = ("flask", "sqlalchemy", "alembic", "prometheus_client", "psycopg")


def unit_of(path: Path) -> str:
    relative = path.relative_to(SERVICE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import in the file (``from a import b`` gives ``a.b`` too,
    since ``b`` may be a module)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def calmon_unit(module: str) -> str | None:
    """The unit a ``service...`` module belongs to, or None for a third-party module."""
    parts = module.split(".")
    if parts[0] != "service":
        return None
    if len(parts) == 1:
        return "__init__"
    known = (SERVICE / parts[1]).is_dir() or (SERVICE / f"{parts[1]}.py").is_file()
    return parts[1] if known else "__init__"


MODULES = sorted(p for p in SERVICE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_unit_is_in_the_rule() -> None:
    assert {unit_of(p) for p in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SERVICE)))
def test_imports_follow_the_rule(path: Path) -> None:
    unit = unit_of(path)
    problems = []
    for line, module in imports_of(path):
        target = calmon_unit(module)
        top = module.split(".")[0]
        if target is not None and target != unit and target not in ALLOWED[unit]:
            problems.append(f"line {line}: {unit} may not import {module} ({target})")
        if top in EDGE_LIBRARIES and unit not in EDGE_LIBRARIES[top]:
            problems.append(f"line {line}: only {sorted(EDGE_LIBRARIES[top])} may import {top}")
        if unit == "calibration" and top in CORE_FORBIDDEN:
            problems.append(f"line {line}: the calibration core may not import {top}")
    assert not problems, "\n".join(problems)


def test_the_rule_has_no_cycles() -> None:
    seen: dict[str, int] = {}

    def visit(unit: str, trail: tuple[str, ...]) -> None:
        assert unit not in trail, " -> ".join((*trail, unit))
        if seen.get(unit) == 2:
            return
        for other in ALLOWED[unit]:
            visit(other, (*trail, unit))
        seen[unit] = 2

    for unit in ALLOWED:
        visit(unit, ())
