"""Readiness on a file system that fills up: run as ``python -m tests.support.full_disk DIR``
inside a mount namespace of its own (``unshare --user --map-root-user --mount``).

It mounts a small tmpfs on ``DIR``, migrates a SQLite database there, asks ``/readyz``, fills
the file system to the last byte with a file beside the database, asks again, removes the file,
and asks a third time. It prints one JSON object: the three replies' statuses and bodies.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from service import create_app
from service.db.migrate import upgrade_to_head

#: The tmpfs's size: room for the migrated database, its WAL and a little more.
SIZE = "8m"


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the file system refuses more; the bytes written."""
    total = 0
    chunk = bytes(1 << 16)
    with open(path, "wb", buffering=0) as out:
        while True:
            try:
                written = out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return total
            total += written or 0


def main(directory: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", directory], check=True)
    url = f"sqlite:///{directory}/calmon.db"
    upgrade_to_head(url)
    app = create_app({"database_url": url})
    client = app.test_client()
    replies: dict[str, Any] = {}

    def ask(when: str) -> None:
        response = client.get("/readyz")
        replies[when] = {"status": response.status_code, "body": response.get_json()}

    ask("before")
    filler = Path(directory) / "filler"
    replies["filled_bytes"] = fill(filler)
    ask("full")
    filler.unlink()
    ask("after")
    app.extensions["calmon.database"].dispose()
    print(json.dumps(replies))


if __name__ == "__main__":
    main(sys.argv[1])
