"""The deployment files and the tests stand alone: they cite nothing outside the repository.

A comment, message or docstring that points at a document the repository does not hold cannot
be followed by whoever reads it; what it should say belongs in the file itself or in ``docs/``.
"""

from __future__ import annotations

import re

from tests.deploy import ROOT

# Built from parts so that this file does not match itself.
OUTSIDE = re.compile("|".join([r"DESIGN" + r"\.md", "design" + " document", r"\bshared" + "/"]))
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".json", ".conf", ".txt", ".toml", ".cfg", ".ini"}


def test_deploy_and_tests_cite_nothing_outside_the_repository() -> None:
    files = [
        path
        for top in ("deploy", "tests")
        for path in sorted((ROOT / top).rglob("*"))
        if path.is_file() and path.suffix in TEXT_SUFFIXES
    ]
    assert len(files) > 50, "the walk found too few files to mean anything"
    citing = {
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    }
    assert not citing, "\n".join(sorted(citing))
