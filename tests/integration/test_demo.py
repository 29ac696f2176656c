"""``calmon demo``: the scenario generator on its own, and the demo against a real served calmon.

The served tests run the demo once per module (12 h of event time at 600 predictions an hour) and
then check what it left behind through the API and ``/metrics``, not through its own report.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from service.demo import (
    COHORTS,
    DRIFTING,
    LABEL_DELAY_HOURS,
    STEP,
    Progress,
    build_scenario,
    gauge_lines,
    reference_sets,
    ticks,
)
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body
from tests.integration.test_served import CALMON, Served, metric_samples, serving_fresh

MODEL = "demo-test"
END = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOUR = 3600.0

# --- the scenario generator, no service ----------------------------------------------------


def test_scenario_is_deterministic_under_its_seed() -> None:
    a, b = (build_scenario(seed=3, hours=6, rate=400, end=END) for _ in range(2))
    for name in ("offsets", "label_offsets", "regions", "logits", "labels", "drifted"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    other = build_scenario(seed=4, hours=6, rate=400, end=END)
    assert not np.array_equal(a.logits, other.logits)
    assert reference_sets(3) == reference_sets(3) != reference_sets(4)
    sets = reference_sets(3)
    assert sets["fit"] != sets["eval"]


def test_labels_come_one_to_four_hours_after_their_prediction() -> None:
    s = build_scenario(seed=1, hours=12, rate=300, end=END)
    delay = s.label_offsets - s.offsets
    low, high = LABEL_DELAY_HOURS
    assert delay.min() >= low * HOUR and delay.max() <= high * HOUR
    assert np.all(np.diff(s.offsets) >= 0) and s.offsets.min() >= 0 and s.offsets.max() < 12 * HOUR
    assert s.start == END - timedelta(hours=12) and s.onset == END - timedelta(hours=6)


def test_only_the_drifting_cohort_drifts_and_only_after_the_onset() -> None:
    s = build_scenario(seed=2, hours=12, rate=2000, end=END)
    apac = s.regions == COHORTS.index(DRIFTING)
    late = s.offsets >= 6 * HOUR
    assert s.drifted.any() and not (s.drifted & ~(apac & late)).any()
    wrong = s.labels != s.logits.argmax(axis=1)
    assert wrong[s.drifted].all()
    assert wrong[apac & late].mean() > wrong[apac & ~late].mean() + 0.2
    assert set(np.unique(s.regions)) == {0, 1, 2}


def test_the_clock_sends_every_prediction_once_and_each_label_after_it() -> None:
    s = build_scenario(seed=5, hours=8, rate=500, end=END)
    sent_at: dict[int, datetime] = {}
    labeled_at: dict[int, datetime] = {}
    for tick in ticks(s):
        lo, hi = tick.clock - STEP, tick.clock
        for i in tick.predictions.tolist():
            assert i not in sent_at
            assert lo <= s.start + timedelta(seconds=float(s.offsets[i])) < hi
            sent_at[i] = tick.clock
        for i in tick.labels.tolist():
            assert i in sent_at, "a label was sent before its prediction"
            assert s.start + timedelta(seconds=float(s.label_offsets[i])) < hi <= s.end
            labeled_at[i] = tick.clock
    assert sorted(sent_at) == list(range(s.offsets.size))
    assert sorted(labeled_at) == np.flatnonzero(s.labeled_by_end).tolist()
    newest = s.offsets >= 7 * HOUR  # the last hour: labels come 1-4 h later
    assert newest.any() and not s.labeled_by_end[newest].any()


def test_progress_writes_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(stream, predictions=100, labels=50)
    for k in range(1, 21):
        progress.update(k / 20, END, 5 * k, 2 * k)
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in stream.getvalue()
    assert lines[-1].endswith("predictions 100/100  labels 40/50")


def test_gauge_lines_pick_the_model_version_and_window() -> None:
    def line(name: str, cohort: str, version: int, model: str, window: str, value: float) -> str:
        labels = f'cohort="{cohort}",contract_version="{version}",model="{model}",window="{window}"'
        return f"{name}{{{labels}}} {value}"

    wanted = line("calmon_drift_status", "region=apac", 2, "m", "24h", 2.0)
    text = "\n".join(
        [
            "# HELP calmon_drift_status ...",
            wanted,
            line("calmon_drift_status", "region=apac", 1, "m", "24h", 0.0),
            line("calmon_drift_status", "all", 2, "m", "1h", -1.0),
            line("calmon_ece", "all", 2, "other", "24h", 0.1),
        ]
    )
    assert gauge_lines(text, "m", 2, "24h") == {"calmon_drift_status region=apac": wanted}


# --- against a served calmon -----------------------------------------------------------------


@dataclass
class DemoRun:
    server: Served
    result: subprocess.CompletedProcess[str]

    def get(self, path: str) -> Any:
        status, body = self.server.call("GET", path)
        assert status == 200, body
        return body

    def reading(self, cohort: str, window: str = "24h") -> dict[str, Any]:
        reading: dict[str, Any] = self.get(
            f"/v1/models/{MODEL}/calibration?window={window}&cohort={cohort}"
        )
        return reading


def run_demo(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CALMON), "demo", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={"PATH": ""},
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    """One demo run (12 h at 600 an hour, seed 7) into a fresh served calmon."""
    with serving_fresh(tmp_path_factory.mktemp("demo")) as server:
        result = run_demo(
            server.url,
            *("--token", ADMIN_TOKEN, "--model", MODEL, "--hours", "12", "--rate", "600"),
            *("--seed", "7", "--wait", "60"),
        )
        yield DemoRun(server, result)


@pytest.mark.slow
def test_demo_succeeds_and_registers_a_contract_fitted_by_the_service(demo: DemoRun) -> None:
    assert demo.result.returncode == 0, demo.result.stderr
    contract = demo.get(f"/v1/models/{MODEL}/contract")
    assert contract["task"] == "multiclass" and len(contract["classes"]) == 3
    # The raw logits are over-confident by 1.6: the service's fitted T recovers that.
    assert contract["calibrator"]["method"] == "temperature"
    assert 1.3 < contract["calibrator"]["temperature"] < 1.9
    assert contract["baseline"]["eval"]["calibrated"]["n"] > 0


@pytest.mark.slow
def test_three_cohorts_have_labeled_readings(demo: DemoRun) -> None:
    slices = {s["cohort"]: s for s in demo.get(f"/v1/models/{MODEL}/cohorts")["slices"]}
    assert {f"region={c}" for c in COHORTS} <= set(slices)
    for cohort in COHORTS:
        assert slices[f"region={cohort}"]["n_labeled"] >= 200


@pytest.mark.slow
def test_only_the_over_confident_cohort_is_flagged(demo: DemoRun) -> None:
    readings = {c: demo.reading(f"region:{c}") for c in COHORTS}
    drifting = readings.pop(DRIFTING)
    assert drifting["drift"]["status"] in ("warn", "alert"), drifting["drift"]
    assert drifting["drift"]["reasons"]
    # Over-confident: it says more than it gets right, and a refit would soften it (T > 1).
    metrics = drifting["metrics"]
    assert metrics["mean_confidence"] - metrics["accuracy"] > 0.05
    assert drifting["drift"]["refit_temperature"] > 1.05
    for cohort, reading in readings.items():
        assert reading["drift"]["status"] == "ok", (cohort, reading["drift"])
        assert drifting["metrics"]["ece"] > 2 * reading["metrics"]["ece"], cohort


@pytest.mark.slow
def test_the_newest_predictions_are_still_unlabeled(demo: DemoRun) -> None:
    latest = demo.reading("all", window="1h")
    assert latest["n_predictions"] > 0
    assert latest["label_coverage"] < 1
    day = demo.reading("all")
    assert 0 < day["label_coverage"] < 1
    assert day["n_predictions"] == 12 * 600


@pytest.mark.slow
def test_the_drift_status_gauges_are_published(demo: DemoRun) -> None:
    samples = metric_samples(demo.server.call("GET", "/metrics", token=None)[1])
    status = {
        dict(labels)["cohort"]: value
        for (name, labels), value in samples.items()
        if name == "calmon_drift_status"
        and dict(labels)["model"] == MODEL
        and dict(labels)["window"] == "24h"
    }
    assert status[f"region={DRIFTING}"] in (1, 2)
    assert [status[f"region={c}"] for c in COHORTS if c != DRIFTING] == [0, 0]


@pytest.mark.slow
def test_the_report_says_where_to_look(demo: DemoRun) -> None:
    out, url = demo.result.stdout, demo.server.url
    assert f"{url}/ui/models/{MODEL}" in out
    assert f"{url}/v1/models/{MODEL}/calibration?window=24h&cohort=region:{DRIFTING}" in out
    assert f'calmon_drift_status{{cohort="region={DRIFTING}"' in out
    assert "predictions" in demo.result.stderr and "labels" in demo.result.stderr


@pytest.mark.slow
def test_a_wrong_token_or_no_service_is_a_clear_error(demo: DemoRun) -> None:
    wrong = run_demo(demo.server.url, "--token", "calmon_not-a-token", "--wait", "0")
    assert wrong.returncode == 2, wrong.stderr
    assert "rejected the token (401)" in wrong.stderr and wrong.stdout == ""
    down = run_demo("http://127.0.0.1:9", "--token", ADMIN_TOKEN, "--wait", "0")
    assert down.returncode == 2 and "cannot reach" in down.stderr
    bad = run_demo(demo.server.url, "--token", ADMIN_TOKEN, "--hours", "1")
    assert bad.returncode == 2 and "--hours" in bad.stderr


def test_without_a_token_the_cli_says_where_to_give_one() -> None:
    missing = run_demo("http://127.0.0.1:9")
    assert missing.returncode == 2 and "CALMON_TOKEN" in missing.stderr


@pytest.mark.slow
def test_the_demo_leaves_a_model_it_did_not_make_alone(demo: DemoRun) -> None:
    status, _ = demo.server.call("POST", "/v1/contracts/fit", fit_body("glyphs"))
    assert status == 201
    refused = run_demo(demo.server.url, "--token", ADMIN_TOKEN, "--model", "glyphs")
    assert refused.returncode == 2 and "choose another --model" in refused.stderr
    contracts = demo.get("/v1/contracts?model=glyphs")["contracts"]
    assert [c["version"] for c in contracts] == [1]
