"""`make run` against a stand-in `calmon`: what it prints and what it starts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_prints_the_ui_address_before_serving(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    bin_dir = venv / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    fake = bin_dir / "calmon"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    (bin_dir / "activate").touch()
    os.utime(bin_dir / "activate", (2**31, 2**31))  # newer than pyproject.toml: no install
    result = subprocess.run(
        ["make", "--no-print-directory", "run", f"VENV={venv}", "HOST=127.0.0.9", "PORT=8123"],
        cwd=ROOT,
        env={**os.environ, "CALMON_ADMIN_TOKEN": "calmon_test"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "calmon: open http://127.0.0.9:8123/ui" in result.stdout.splitlines()
    started = calls.read_text().splitlines()
    assert started[0] == "migrate"
    assert started[1].startswith("serve --host 127.0.0.9 --port 8123")
