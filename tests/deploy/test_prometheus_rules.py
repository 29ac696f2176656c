"""The Prometheus scrape config, alert rules and their promtool unit tests in deploy/prometheus.

promtool parses and evaluates the YAML; the checks here read the files as text (metric names,
which alerts are tested), so they hold for any valid spelling of the same YAML, except the last,
which reads the drift alerts' rules as parsed YAML.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.deploy import DEPLOY, KNOWN_SERIES, assert_ok, metric_names, promtool

PROMETHEUS = DEPLOY / "prometheus"
CONFIG = PROMETHEUS / "prometheus.yml"
RULES = PROMETHEUS / "rules" / "calmon.rules.yml"
RULE_TESTS = PROMETHEUS / "tests" / "calmon.rules.test.yml"

ALERTS = {
    "CalmonDriftAlert",
    "CalmonDriftWarn",
    "CalmonLabelsStalled",
    "CalmonIngestStopped",
    "CalmonReadingsStale",
    "CalmonLabelFoldLagging",
    "CalmonDown",
}

# The calibration gauges an alert could re-test at every evaluation (a fixed-level test at every
# look); the drift verdict is calmon_drift_status, whose sequential rule controls false alarms
# over time.
READING_GAUGES = re.compile(
    r"calmon_(ece|ece_debiased|ece_ci_lower|ece_ci_upper|ece_delta|policy_max_ece)\b"
)

RECORD_RE = re.compile(r"^\s*- record:\s*(\S+)\s*$", re.MULTILINE)
ALERT_RE = re.compile(r"^\s*- alert:\s*(\S+)\s*$", re.MULTILINE)


def rule_blocks(text: str) -> dict[str, str]:
    """Split the rules file into {alert name: the YAML text of its rule}."""
    starts = [m for m in re.finditer(r"^\s*- (alert|record):\s*(\S+)\s*$", text, re.MULTILINE)]
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return {m.group(2): text[m.start() : end] for m, end in zip(starts, ends, strict=True)}


@pytest.mark.slow
def test_config_is_valid_and_loads_the_rules() -> None:
    result = promtool("check", "config", CONFIG)
    assert_ok(result)
    # `rules/*.yml` matching nothing is still a valid config: make sure the glob found our file.
    assert "rules/calmon.rules.yml" in result.stdout, result.stdout
    assert "SUCCESS: 1 rule files found" in result.stdout, result.stdout


def test_config_scrapes_calmon() -> None:
    text = CONFIG.read_text()
    assert re.search(r"^\s*- job_name: calmon\s*$", text, re.MULTILINE)
    assert re.search(r"^\s*metrics_path: /metrics\s*$", text, re.MULTILINE)
    assert re.search(r"^\s*scrape_interval: 15s\s*$", text, re.MULTILINE)
    assert '- targets: ["calmon:8000"]' in text
    assert "127.0.0.1:8000" in text  # the comment on running next to `make run`


@pytest.mark.slow
def test_rules_are_valid_and_lint_clean() -> None:
    assert_ok(promtool("check", "rules", "--lint=all", "--lint-fatal", RULES))


@pytest.mark.slow
def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS)
    assert_ok(result)
    assert "SUCCESS" in result.stdout


def test_rules_use_only_exported_metric_names() -> None:
    text = RULES.read_text()
    recorded = set(RECORD_RE.findall(text))
    unknown = metric_names(text) - KNOWN_SERIES - recorded
    assert not unknown, f"names calmon does not export (nor recorded here): {sorted(unknown)}"


def test_recording_rule_names_build_on_exported_metrics() -> None:
    recorded = RECORD_RE.findall(RULES.read_text())
    assert recorded
    for name in recorded:
        # level:metric:operations, with `_total` dropped from counters that went through rate().
        level, metric, operations = name.split(":")
        assert level and operations, name
        assert metric in KNOWN_SERIES or f"{metric}_total" in KNOWN_SERIES, name


def test_rule_tests_feed_only_exported_metric_names() -> None:
    # A unit test fed with a misspelt series would test a metric the service never exports.
    text = RULE_TESTS.read_text()
    recorded = set(RECORD_RE.findall(RULES.read_text()))
    unknown = metric_names(text) - KNOWN_SERIES - recorded
    assert not unknown, f"test series calmon does not export: {sorted(unknown)}"


def test_alerts_carry_severity_duration_and_annotations() -> None:
    blocks = rule_blocks(RULES.read_text())
    assert set(ALERT_RE.findall(RULES.read_text())) == ALERTS
    for alert in ALERTS:
        block = blocks[alert]
        assert re.search(r"^\s*for: \d+[smh]\s*$", block, re.MULTILINE), alert
        assert re.search(r"^\s*severity: (critical|warning)\s*$", block, re.MULTILINE), alert
        assert re.search(r"^\s*summary:", block, re.MULTILINE), alert
        assert re.search(r"^\s*description:", block, re.MULTILINE), alert
        assert "$labels.model" in block or alert == "CalmonDown", alert
        assert "$value" in block, alert


def test_every_alert_is_tested_firing_and_silent() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    alertname = None
    for line in RULE_TESTS.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("alertname:"):
            alertname = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("exp_alerts:"):
            assert alertname is not None, line
            expected = stripped.split(":", 1)[1].strip()
            (silent if expected == "[]" else firing).add(alertname)
            alertname = None
    assert not ALERTS - firing, f"never tested firing: {sorted(ALERTS - firing)}"
    assert not ALERTS - silent, f"never tested silent: {sorted(ALERTS - silent)}"


def alert_rules() -> dict[str, dict[str, Any]]:
    """{alert name: its rule} from the rules file, parsed as YAML."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_drift_alerts_read_the_status_not_the_interval() -> None:
    rules = alert_rules()
    for name, rule in rules.items():
        assert not READING_GAUGES.search(rule["expr"]), f"{name} re-tests a reading: {rule['expr']}"
    levels = {"CalmonDriftAlert": ("2", "critical"), "CalmonDriftWarn": ("1", "warning")}
    for name, (status, severity) in levels.items():
        expr = " ".join(rules[name]["expr"].split())
        cell = "model, contract_version, cohort, window"
        assert expr == f"max by ({cell}) (calmon_drift_status) == {status}", expr
        assert rules[name]["labels"] == {"severity": severity}, name
