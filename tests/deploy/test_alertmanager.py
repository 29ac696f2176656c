"""The Alertmanager configuration example in deploy/alertmanager.

``amtool check-config`` (Debian's ``prometheus-alertmanager`` package, which ``.ci/run`` installs)
parses it; a missing ``amtool`` fails the test rather than skipping it. The other checks read the
parsed YAML: they build every alert the rules file can fire for one calibration cell (one alert
per rule and window of calmon's default CALMON_WINDOWS), apply the inhibition rules to every
combination of them the way Alertmanager does (a target is inhibited by another firing alert
that matches a rule's source matchers and carries the same values of its ``equal`` labels), and
check that one alert per model and cohort stays active: the shortest window's critical alert, or
without one the shortest window's warning. The last test posts such alerts to a real Alertmanager
(the same package's ``prometheus-alertmanager``) running the example and reads which are left
uninhibited.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import DEFAULT_WINDOWS
from service.stream.windows import parse_duration
from tests.deploy import DEPLOY

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
RULES = DEPLOY / "prometheus" / "rules" / "calmon.rules.yml"

AMTOOL_MISSING = (
    "amtool is not on PATH. `.ci/run` installs it with Debian's prometheus-alertmanager package "
    "(`apt-get install -y --no-install-recommends prometheus-alertmanager`); install it the same "
    "way."
)

MATCHER_RE = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$')
BY_RE = re.compile(r"\bby\s*\(([^)]*)\)")


def amtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("amtool")
    if exe is None:
        pytest.fail(AMTOOL_MISSING, pytrace=False)
    return subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def load_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    return config


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def windows_shortest_first() -> list[str]:
    return sorted(DEFAULT_WINDOWS, key=parse_duration)


def alert_labels(rule: dict[str, Any], **values: str) -> dict[str, str]:
    """The labels an alert of ``rule`` carries: its ``by (...)`` labels set from ``values``
    (``value-of-<label>`` when absent), the rule's own labels and ``alertname``."""
    match = BY_RE.search(rule["expr"])
    by = [name.strip() for name in match.group(1).split(",")] if match else []
    labels = {name: values.get(name, f"value-of-{name}") for name in by}
    labels.update(rule.get("labels", {}))
    labels["alertname"] = rule["alert"]
    return labels


def cell_alerts(model: str = "fraud", cohort: str = "all") -> list[dict[str, str]]:
    """Every alert the windowed rules fire for one model and cohort, one per rule and window."""
    return [
        alert_labels(rule, model=model, cohort=cohort, contract_version="3", window=window)
        for rule in alert_rules()
        if "window" in alert_labels(rule)
        for window in windows_shortest_first()
    ]


def matches(matcher: str, labels: dict[str, str]) -> bool:
    parsed = MATCHER_RE.match(matcher)
    assert parsed, f'matcher {matcher!r} is not name<op>"value"'
    name, op, value = parsed.groups()
    actual = labels.get(name, "")
    if op == "=":
        return actual == value
    if op == "!=":
        return actual != value
    found = re.fullmatch(value, actual) is not None
    return found if op == "=~" else not found


def matches_all(matchers: list[str], labels: dict[str, str]) -> bool:
    return all(matches(m, labels) for m in matchers)


def active(
    alerts: list[dict[str, str]], inhibit_rules: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """The alerts of ``alerts`` (all firing) that no other one inhibits."""

    def inhibited(target: dict[str, str]) -> bool:
        return any(
            source is not target
            and matches_all(rule["target_matchers"], target)
            and matches_all(rule["source_matchers"], source)
            and all(source.get(n, "") == target.get(n, "") for n in rule.get("equal", []))
            for rule in inhibit_rules
            for source in alerts
        )

    return [alert for alert in alerts if not inhibited(alert)]


def describe(alert: dict[str, str]) -> str:
    return (
        f"{alert['alertname']}{{model={alert.get('model')}, cohort={alert.get('cohort')}, "
        f"window={alert.get('window')}}}"
    )


def test_amtool_accepts_the_config() -> None:
    result = amtool("check-config", CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_amtool_rejects_a_broken_copy(tmp_path: Path) -> None:
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(CONFIG.read_text().replace("receiver: calmon-page", "receiver: calmon-pages"))
    result = amtool("check-config", broken)
    assert result.returncode != 0
    assert "calmon-pages" in result.stdout + result.stderr


def test_the_rules_file_has_windowed_critical_and_warning_alerts() -> None:
    severities = {(a["alertname"], a["severity"]) for a in cell_alerts()}
    assert severities == {("CalmonDriftAlert", "critical"), ("CalmonDriftWarn", "warning")}


def test_grouping_is_by_model_and_cohort_labels_the_drift_alerts_carry() -> None:
    group_by = load_config()["route"]["group_by"]
    assert sorted(group_by) == ["cohort", "model"]
    for alert in cell_alerts():
        assert set(group_by) <= alert.keys(), describe(alert)


def test_critical_alerts_page_and_warnings_do_not() -> None:
    route = load_config()["route"]

    def receiver(labels: dict[str, str]) -> str:
        for child in route.get("routes", []):
            if matches_all(child.get("matchers", []), labels):
                return str(child["receiver"])
        return str(route["receiver"])

    pages = {a["severity"]: receiver(a) for a in cell_alerts()}
    assert pages["critical"] != pages["warning"]
    assert all(receiver(alert_labels(r)) == pages[r["labels"]["severity"]] for r in alert_rules())


def test_inhibit_rules_use_matchers_and_equal_on_model_and_cohort() -> None:
    for rule in load_config()["inhibit_rules"]:
        assert rule.keys() == {"source_matchers", "target_matchers", "equal"}, rule
        assert sorted(rule["equal"]) == ["cohort", "model"], rule


def test_one_alert_per_model_and_cohort_stays_active_for_any_combination_of_windows() -> None:
    inhibit_rules = load_config()["inhibit_rules"]
    alerts = cell_alerts()
    windows = windows_shortest_first()
    assert len(alerts) == 2 * len(windows)
    for size in range(1, len(alerts) + 1):
        for firing in itertools.combinations(alerts, size):
            critical = [a for a in firing if a["severity"] == "critical"]
            candidates = critical or list(firing)
            expected = min(candidates, key=lambda a: windows.index(a["window"]))
            left = active(list(firing), inhibit_rules)
            assert left == [expected], (
                f"firing {[describe(a) for a in firing]}: active {[describe(a) for a in left]}"
            )


def test_another_model_or_cohort_is_not_inhibited() -> None:
    inhibit_rules = load_config()["inhibit_rules"]
    paging = cell_alerts(model="fraud", cohort="all")
    longest = windows_shortest_first()[-1]
    others = [
        a
        for a in cell_alerts(model="fraud", cohort="region=eu") + cell_alerts(model="churn")
        if a["window"] == longest and a["severity"] == "warning"
    ]
    assert len(others) == 2
    left = active(paging + others, inhibit_rules)
    assert [describe(a) for a in left if a["cohort"] == "all" and a["model"] == "fraud"] == [
        describe(paging[0])
    ]
    assert [a for a in others if a not in left] == []


def test_alerts_without_a_window_are_never_inhibited() -> None:
    inhibit_rules = load_config()["inhibit_rules"]
    unwindowed = [
        alert_labels(rule, model="fraud")
        for rule in alert_rules()
        if "window" not in alert_labels(rule)
    ]
    assert {a["alertname"] for a in unwindowed} >= {"CalmonDown", "CalmonReadingsStale"}
    everything = cell_alerts() + unwindowed
    left = active(everything, inhibit_rules)
    assert [describe(a) for a in unwindowed if a not in left] == []


ALERTMANAGER_MISSING = (
    "prometheus-alertmanager is not on PATH. `.ci/run` installs it with Debian's "
    "prometheus-alertmanager package; install it the same way."
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_json(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
        method="GET" if data is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        text = reply.read().decode()
    return json.loads(text) if text else None


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on a free port with the example configuration, its receivers'
    webhooks pointed at a closed local port (no notification leaves the host); its base URL."""
    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if exe is None:
        pytest.fail(ALERTMANAGER_MISSING, pytrace=False)
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        re.sub(r"url: http://[^/\s]+/", "url: http://127.0.0.1:9/", CONFIG.read_text())
    )
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    process = subprocess.Popen(
        [
            exe,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "alertmanager.log").read_text()
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "alertmanager.log").read_text()
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_a_running_alertmanager_leaves_one_drift_alert_per_cohort_uninhibited(
    alertmanager: str,
) -> None:
    # Every windowed drift alert of fraud/all, and the longest window's warning of another
    # cohort and another model.
    paging = cell_alerts()
    longest = windows_shortest_first()[-1]
    others = [
        a
        for a in cell_alerts(cohort="region=eu") + cell_alerts(model="churn")
        if a["window"] == longest and a["severity"] == "warning"
    ]
    starts = datetime.now(UTC) - timedelta(minutes=5)
    posted = [
        {
            "labels": labels,
            "annotations": {"summary": describe(labels)},
            "startsAt": starts.isoformat(),
        }
        for labels in paging + others
    ]
    http_json(f"{alertmanager}/api/v2/alerts", posted)

    expected = sorted(describe(a) for a in [paging[0], *others])
    deadline = time.monotonic() + 30
    while True:
        every = http_json(f"{alertmanager}/api/v2/alerts")
        left = http_json(f"{alertmanager}/api/v2/alerts?inhibited=false")
        active_now = sorted(describe(a["labels"]) for a in left)
        if len(every) == len(posted) and active_now == expected:
            break
        assert time.monotonic() < deadline, f"active {active_now}, expected {expected}"
        time.sleep(0.5)

    inhibited = [a for a in every if a["status"]["inhibitedBy"]]
    assert len(inhibited) == len(paging) - 1
    assert all(a["status"]["state"] == "suppressed" for a in inhibited)
