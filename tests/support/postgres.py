"""A throwaway PostgreSQL server of a test's own (``initdb`` and ``pg_ctl`` as the ``postgres``
user, on a free port under a temporary directory), for settings a shared server must not get:
``synchronous_standby_names`` naming a standby that never connects makes every commit that
writes WAL wait for ever, as on a primary cut off from its synchronous standby."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.formation import free_port, postgres_bindir

AS_POSTGRES = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


def _run(*args: str) -> None:
    subprocess.run([*AS_POSTGRES, *args], check=True, capture_output=True, timeout=120)


@contextmanager
def standalone(**settings: str) -> Iterator[str]:
    """A started server with ``settings`` in its postgresql.conf; yields its URL (user
    ``postgres``, database ``postgres``); stopped and deleted afterwards."""
    root = Path(tempfile.mkdtemp(prefix="calmon-postgres-"))
    shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    bindir = postgres_bindir()
    _run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    lines = {
        "port": str(port),
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": f"'{root}'",
        **settings,
    }
    with (data / "postgresql.conf").open("a") as conf:
        conf.writelines(f"{name} = {value}\n" for name, value in lines.items())
    _run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        _run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
