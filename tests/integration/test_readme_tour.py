"""The README's 5-minute tour, run verbatim with bash against a served instance at today's time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.test_served import serving_fresh

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REFRESH_SECONDS = 1
"""``CALMON_REFRESH_SECONDS`` of the served instance: the tour's gauges appear within it."""


def tour_blocks() -> list[str]:
    """The ```sh blocks between the tour's heading and the next ``##`` heading, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## A 5-minute tour", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


def json_values(text: str) -> list[Any]:
    """The JSON values printed one after another (curl prints a reply without a newline)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def block_with(blocks: list[str], text: str) -> int:
    (index,) = [i for i, block in enumerate(blocks) if text in block]
    return index


def run_tour(url: str, blocks: list[str], cwd: Path) -> dict[int, tuple[str, int]]:
    """Run every block in one bash process (variables carry over, as in one terminal); each
    block's output and the exit status of its last command, by block index. Before the metrics
    block the script waits a few refresh periods, as the README says the gauges take."""
    script = []
    for index, block in enumerate(blocks):
        if "/metrics" in block:
            script.append(f"sleep {4 * REFRESH_SECONDS}")
        script.append(f"echo '>>> block {index}'")
        script.append(block.rstrip("\n"))
        script.append(f"printf '\\n<<< block {index} exit %s\\n' \"$?\"")
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run(
        [bash, "-c", "\n".join(script)],
        cwd=cwd,
        env={**os.environ, "TOKEN": ADMIN_TOKEN, "CALMON_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    outputs: dict[int, tuple[str, int]] = {}
    for match in re.finditer(
        r">>> block (\d+)\n(.*?)\n<<< block \1 exit (\d+)\n", done.stdout, flags=re.DOTALL
    ):
        outputs[int(match.group(1))] = (match.group(2), int(match.group(3)))
    assert sorted(outputs) == list(range(len(blocks))), done.stdout + done.stderr
    return outputs


def test_the_readme_tour_runs_verbatim_against_a_served_instance(tmp_path: Path) -> None:
    blocks = tour_blocks()
    fit = block_with(blocks, "/v1/contracts/fit")
    stream = block_with(blocks, "/v1/labels")
    read = block_with(blocks, "/calibration")
    gate = block_with(blocks, "calmon gate")
    metrics = block_with(blocks, "/metrics")
    # The tour's `.venv/bin/...` commands, in a directory of the test's own.
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".venv").symlink_to(Path(sys.executable).parent.parent)
    with serving_fresh(tmp_path, CALMON_REFRESH_SECONDS=str(REFRESH_SECONDS)) as server:
        outputs = run_tour(server.url, blocks, tmp_path / "checkout")

    for index, (output, code) in outputs.items():
        if index != gate:
            assert code == 0, (index, output)

    (fitted,) = json_values(outputs[fit][0])
    assert fitted["calibrator"]["temperature"] == pytest.approx(1.2297, abs=1e-4)
    assert fitted["version"] == 1

    predictions_reply, labels_reply = json_values(outputs[stream][0])
    assert predictions_reply["accepted"] == 2, predictions_reply
    assert labels_reply["joined"] == 2, labels_reply

    (reading,) = json_values(outputs[read][0])
    assert reading["n_labeled"] == 1, reading

    gate_output, gate_code = outputs[gate]
    assert gate_code == 1, gate_output
    assert gate_output.startswith("gate FAIL"), gate_output
    assert f"({fitted['id']})" in gate_output.splitlines()[0], gate_output

    lines = outputs[metrics][0].strip().splitlines()
    assert any('model="glyphs"' in line for line in lines), lines
    assert all(line.startswith("calmon_drift_status") for line in lines), lines
