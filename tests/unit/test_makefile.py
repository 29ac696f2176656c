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
    installed = venv / ".installed-server"
    installed.touch()
    os.utime(installed, (2**31, 2**31))  # newer than pyproject.toml: no install
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


def _dry_run(target: str, venv: Path) -> str:
    """The commands ``make TARGET`` would run in a fresh ``venv`` (``make -n``)."""
    return subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_installs_the_server_alone_and_make_test_the_dev_tools(tmp_path: Path) -> None:
    run = _dry_run("run", tmp_path / "venv")
    installs = [line for line in run.splitlines() if "pip install" in line]
    assert len(installs) == 1 and "-e '.[server]'" in installs[0], run
    assert "dev" not in installs[0]
    assert "WARNING" not in run.upper()
    test = _dry_run("test", tmp_path / "venv")
    assert any("pip install" in line and "-e '.[dev]'" in line for line in test.splitlines())
