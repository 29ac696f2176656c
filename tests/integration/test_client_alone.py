"""The client installed alone: ``pip install .`` of this checkout into a fresh virtualenv brings
numpy and pyarrow and nothing of the server, and logs to a served calmon from there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import ADMIN_TOKEN, front_of_the_database
from tests.integration.factories import fit_body
from tests.integration.test_served import serving_fresh

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: What the server extra brings, as imported.
SERVER_MODULES = (
    "flask",
    "werkzeug",
    "gunicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "scipy",
    "pydantic",
    "orjson",
    "prometheus_client",
)
#: A model server's use of the client, run by the fresh virtualenv's Python.
LOGGING = """
import json, sys
from datetime import UTC, datetime, timedelta
import numpy as np
from service.client import Calmon

server = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3].split(",")))
calmon = Calmon(sys.argv[1], sys.argv[2], model="alone")
now = datetime.now(UTC)
ids = [f"p{i}" for i in range(300)]
logits = np.random.default_rng(1).normal(size=(300, 3))
calmon.log_predictions(ids, logits, ts=now - timedelta(minutes=5), cohort={"region": "emea"})
calmon.log_labels(ids[:100], [0] * 100, ts=now - timedelta(minutes=4))
calmon.close()
print(json.dumps({"imported": server, "stats": vars(calmon.stats)}))
"""


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@front_of_the_database
def test_the_client_installs_alone_and_logs_to_a_served_calmon(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    for name in ("service", "migrations"):
        shutil.copytree(ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # docs/client.md's line, run at the root of a checkout.
    _run(
        python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", ".", cwd=checkout
    )

    found = json.loads(
        _run(
            python,
            "-c",
            "import importlib.util, json, sys; "
            "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))",
            *SERVER_MODULES,
            cwd=tmp_path,
        )
    )
    assert found == []
    assert _run(venv / "bin" / "calmon", "--version", cwd=tmp_path).strip() == "calmon 0.1.0"

    (tmp_path / "served").mkdir()
    with serving_fresh(tmp_path / "served") as served:
        assert served.call("POST", "/v1/contracts/fit", fit_body("alone"))[0] == 201
        script = tmp_path / "log.py"
        script.write_text(LOGGING)
        reply = json.loads(
            _run(python, script, served.url, ADMIN_TOKEN, ",".join(SERVER_MODULES), cwd=tmp_path)
        )
        assert reply["imported"] == []
        stats = reply["stats"]
        assert (stats["sent"], stats["accepted"], stats["joined"]) == (400, 300, 100)
        assert (stats["rejected"], stats["dropped"]) == (0, 0)

        # The operator's ingest runs from the client install too, the service named by
        # CALMON_URL; a server command says which extra it needs.
        rows = tmp_path / "more.csv"
        ts = (datetime.now(UTC) - timedelta(minutes=3)).isoformat()
        rows.write_text("id,ts,logits\n" + "".join(f'q{i},{ts},"[1, 0, {i}]"\n' for i in range(50)))
        env = {"PATH": "", "CALMON_URL": served.url, "CALMON_TOKEN": ADMIN_TOKEN}
        calmon = venv / "bin" / "calmon"
        out = _run(calmon, "ingest", "predictions", rows, "--model", "alone", cwd=tmp_path, env=env)
        assert "50 new predictions" in out
        status, reading = served.call("GET", "/v1/models/alone/calibration?window=1h")
        assert status == 200, reading
        assert reading["n_predictions"] == 350

    migrate = subprocess.run(
        [str(venv / "bin" / "calmon"), "migrate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 2
    assert "server extra" in migrate.stderr and "Traceback" not in migrate.stderr
    assert not (tmp_path / "instance").exists()
