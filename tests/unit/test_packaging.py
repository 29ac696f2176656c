"""pyproject.toml installs every package of service/, and the migrations inside it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _directories(top: Path, prefix: tuple[str, ...]) -> set[str]:
    """Dotted names of `top` and every directory below it that holds a file (no caches)."""
    return {
        ".".join(prefix + d.relative_to(top).parts)
        for d in [top, *top.rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts and any(f.is_file() for f in d.iterdir())
    }


def test_every_directory_is_listed_and_the_migrations_are_mapped_into_it() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    expected = _directories(ROOT / "service", ("service",)) | _directories(
        ROOT / "migrations", ("service", "migrations")
    )
    # A directory left out of the list makes setuptools warn at install time ("absent from the
    # packages configuration") and, in a future version, drop its files.
    assert set(setuptools["packages"]) == expected
    assert setuptools["package-dir"] == {"service.migrations": "migrations"}
    data = setuptools["package-data"]
    assert "script.py.mako" in data["service.migrations"]
    assert data["service.migrations.versions"] == ["*.py"]
    assert data["service.web.templates.ui"] == ["*"]
    assert (ROOT / "migrations" / "env.py").is_file()


def test_the_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # A TOML table here is deprecated by setuptools and warns on every install.
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])
