"""The operator's ``calmon``: its version, where it finds the service, and what it says about
the database it is pointed at (no schema yet, the revisions a migration applied)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from service.cli import main
from service.cli.database import shown_url
from service.db.migrate import head_revisions
from tests.integration.conftest import ADMIN_TOKEN, BACKEND, fresh_database, front_of_the_database
from tests.integration.test_served import CALMON, STARTUP_SECONDS, free_port, wait_until


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"calmon {metadata.version('calmon')}"


def test_calmon_url_is_the_default_of_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("CALMON_URL", url)
    assert main(["gate", "--contract", "c-1", "--token", "t"]) == 2
    assert f"cannot reach {url}" in capsys.readouterr().err
    monkeypatch.delenv("CALMON_URL")
    assert main(["gate", "--contract", "c-1", "--token", "t"]) == 2
    assert "give --url or set CALMON_URL" in capsys.readouterr().err


COMMANDS = [
    ["token", "list"],
    ["token", "create", "--role", "reader"],
    ["prune", "--older-than", "30d"],
    ["audit", "head"],
    ["audit", "verify"],
    ["refresh"],
    ["serve", "--host", "256.0.0.1"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_command_without_a_schema_says_so_and_leaves_no_file(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "instance" / "calmon.db"
    url = f"sqlite:///{path}"
    monkeypatch.setenv("CALMON_DATABASE_URL", url)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err == (
        f"calmon: no calmon schema at {url}; run `calmon migrate` or set CALMON_DATABASE_URL\n"
    )
    assert not (tmp_path / "instance").exists()


def test_a_database_without_the_schema_is_named_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with fresh_database(tmp_path) as url:
        if url.startswith("sqlite"):
            Path(url.removeprefix("sqlite:///")).write_bytes(b"")  # an empty SQLite file
        monkeypatch.setenv("CALMON_DATABASE_URL", url)
        assert main(["token", "list"]) == 2
        assert f"no calmon schema at {shown_url(url)};" in capsys.readouterr().err


def test_migrate_names_the_database_and_the_revisions_it_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with fresh_database(tmp_path) as url:
        monkeypatch.setenv("CALMON_DATABASE_URL", url)
        assert main(["migrate"]) == 0
        lines = capsys.readouterr().err.splitlines()
        assert lines[0] == f"migrating {shown_url(url)}"
        applied = [line.split()[1] for line in lines if line.startswith("applied ")]
        assert applied[0] == "0001" and applied[-1] == head_revisions()[0]
        assert applied == sorted(applied) and len(applied) > 1
        assert (
            f"{shown_url(url)} is at the latest schema ({len(applied)} revisions applied)"
            in (lines[-1])
        )
        assert main(["migrate"]) == 0
        again = capsys.readouterr().err.splitlines()
        assert not any(line.startswith("applied ") for line in again)
        assert again[-1] == f"{shown_url(url)} is at the latest schema (nothing to apply)"
        assert main(["token", "list"]) == 0


def test_a_printed_database_url_hides_its_password() -> None:
    shown = shown_url("postgresql://calmon:s3cret@db.internal:5432/calmon")
    assert "s3cret" not in shown and shown.startswith("postgresql://calmon:")
    assert "db.internal:5432/calmon" in shown


#: Runs with psycopg unimportable, as in an install without the postgresql extra.
WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None
from service import create_app
from service.cli import main
code = main(sys.argv[1:])
if code == 0:
    app = create_app({"admin_token": "calmon_test-no-psycopg"})
    print(app.test_client().get("/readyz").status_code)
    app.extensions["calmon.database"].dispose()
sys.exit(code)
"""


def _without_psycopg(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CALMON_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_sqlite_needs_no_psycopg_and_postgresql_names_its_extra(tmp_path: Path) -> None:
    done = _without_psycopg(tmp_path, f"sqlite:///{tmp_path / 'calmon.db'}", "migrate")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200"  # /readyz: served on SQLite, schema at head
    done = _without_psycopg(tmp_path, "postgresql://calmon:pw@127.0.0.1:1/calmon", "migrate")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "psycopg, is not installed" in done.stderr
    assert "postgresql extra" in done.stderr and "pw" not in done.stderr


@pytest.mark.parametrize("command", [["migrate"], ["token", "list"]], ids=" ".join)
def test_a_database_that_cannot_be_opened_is_named_without_a_traceback(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if BACKEND == "postgresql":
        base = os.environ["CALMON_TEST_DATABASE_URL"]
        url = base.rsplit("/", 1)[0] + "/calmon_no_such_database"
    else:
        (tmp_path / "a-directory").mkdir()
        url = f"sqlite:///{tmp_path / 'a-directory'}"
    monkeypatch.setenv("CALMON_DATABASE_URL", url)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"at {shown_url(url)}" in err and "Traceback" not in err


@front_of_the_database
@pytest.mark.slow
def test_serve_starts_before_a_database_it_cannot_open_and_is_not_ready(tmp_path: Path) -> None:
    """An API process may start before its database: it says so, and /readyz answers 503."""
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/calmon"  # nothing listens there
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(CALMON), "serve", "--port", str(port), "--workers", "1"],
            env={**os.environ, "CALMON_DATABASE_URL": url, "CALMON_ADMIN_TOKEN": ADMIN_TOKEN},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            status = wait_until(
                lambda: process.poll() is not None or _status(f"http://127.0.0.1:{port}/readyz"),
                STARTUP_SECONDS,
                "calmon to answer",
            )
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert process.returncode != 2 and status == 503, log.read_text()
    first = log.read_text().splitlines()[0]
    assert first.startswith(f"calmon: cannot open the database at {shown_url(url)}"), first
    assert first.endswith("; serving, /readyz reports the database"), first


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
