"""pyproject.toml installs every package of service/, and the migrations inside it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_and_the_migrations_are_mapped_into_it() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "service").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert set(setuptools["packages"]) == found | {"service.migrations"}
    assert setuptools["package-dir"] == {"service.migrations": "migrations"}
    data = setuptools["package-data"]["service.migrations"]
    assert {"script.py.mako", "versions/*.py"} <= set(data)
    assert (ROOT / "migrations" / "env.py").is_file()
