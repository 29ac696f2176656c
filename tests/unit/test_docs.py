"""The README stays a short introduction, and the docs stand on their own."""

from __future__ import annotations

import re
from pathlib import Path

from tests.deploy.test_stands_alone import OUTSIDE

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_short_and_has_the_two_quickstart_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make run" in text and "make test" in text


def test_no_document_cites_a_design_document_outside_the_repository() -> None:
    for path in DOCS:
        assert not OUTSIDE.search(path.read_text()), path


def test_relative_links_point_at_files_that_exist() -> None:
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            assert (path.parent / target).exists(), f"{path.name}: {target}"
