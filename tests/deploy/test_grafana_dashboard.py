"""The Grafana dashboard and provisioning files in deploy/grafana, checked structurally.

No Grafana runs in CI: the JSON model is checked for what Grafana needs to load it (keys, unique
panel ids, grid positions), for the panels the platform team relies on, and for PromQL that
parses (via promtool) and only names metrics calmon exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import DEPLOY, KNOWN_SERIES, assert_ok, metric_names, promtool

GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "calmon-dashboard.json"
PROVISIONING = GRAFANA / "provisioning"

# Panel title prefix -> fragments its queries must contain.
REQUIRED_PANELS = {
    "ECE with 95% interval": ["calmon_ece{", "calmon_ece_ci_lower{", "calmon_ece_ci_upper{"],
    "Drift status": ["calmon_drift_status{"],
    "Refit temperature": ["calmon_refit_temperature{"],
    "Label coverage": ["calmon_label_coverage{"],
    "Label delay": ["histogram_quantile(", "calmon_label_delay_seconds_bucket{"],
    "Ingest rate": ["rate(calmon_predictions_ingested_total{"],
    "Labels by outcome": ["calmon_labels_ingested_total{", "by (outcome)"],
    "Rejected items": ["calmon_rejected_items_total"],
    "HTTP p95 latency": ["histogram_quantile(0.95", "calmon_http_request_duration_seconds_bucket"],
}

# Values for the dashboard's variables, so that its queries become plain PromQL.
VARIABLE_VALUES = {
    "$__rate_interval": "1m",
    "$model": "fraud",
    "$cohort": "all",
    "$window": "24h",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Yield every panel, including those folded into collapsed rows."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target


def promql(dashboard: dict[str, Any]) -> list[str]:
    """Return every PromQL expression of the dashboard: targets, annotations, variables."""
    exprs = [target["expr"] for _, target in targets(dashboard)]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert match, variable["definition"]
            exprs.append(match.group(1))
    return exprs


def substitute(expr: str) -> str:
    for variable, value in VARIABLE_VALUES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unknown variable in {expr!r}"
    return expr


def test_required_keys(dashboard: dict[str, Any]) -> None:
    for key in ("title", "uid", "panels", "schemaVersion", "templating"):
        assert key in dashboard, key
    assert dashboard["uid"] == "calmon-overview"
    assert isinstance(dashboard["schemaVersion"], int)
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["panels"]


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in all_panels(dashboard["panels"])]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), sorted(ids)


def test_every_panel_has_a_type_and_a_grid_position(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        assert panel.get("type"), panel.get("title")
        assert panel.get("title"), panel["id"]
        grid = panel.get("gridPos")
        assert grid, panel["title"]
        assert all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")), panel["title"]
        assert grid["h"] > 0 and grid["w"] > 0, panel["title"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    boxes = [(p["title"], p["gridPos"]) for p in dashboard["panels"]]
    for i, (title_a, a) in enumerate(boxes):
        for title_b, b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"]
                or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"]
                or b["y"] + b["h"] <= a["y"]
            )
            assert apart, f"{title_a!r} overlaps {title_b!r}"


def test_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("model", "cohort", "window"):
        variable = variables[name]
        assert variable["type"] == "query", name
        assert variable["datasource"]["uid"] == "${datasource}", name
        assert re.fullmatch(
            rf"label_values\(calmon_ece(\{{[^}}]*\}})?, {name}\)", variable["definition"]
        ), variable["definition"]
        assert variable["query"]["query"] == variable["definition"], name


def test_queries_go_to_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for title, target in targets(dashboard):
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert target.get("refId"), title


def test_queries_use_only_exported_metric_names(dashboard: dict[str, Any]) -> None:
    exprs = promql(dashboard)
    assert exprs
    unknown = metric_names("\n".join(exprs)) - KNOWN_SERIES
    assert not unknown, f"names calmon does not export: {sorted(unknown)}"


@pytest.mark.slow
def test_queries_parse(dashboard: dict[str, Any], tmp_path: Path) -> None:
    # promtool has no "parse this expression" command, but it parses every rule's expr: wrap the
    # dashboard's queries into recording rules. JSON is YAML, so no YAML writer is needed.
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substitute(expr)}
        for i, expr in enumerate(promql(dashboard))
    ]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}, indent=2))
    assert_ok(promtool("check", "rules", path))


def test_required_panels_exist(dashboard: dict[str, Any]) -> None:
    by_title = {
        panel["title"]: "\n".join(t["expr"] for t in panel.get("targets", []))
        for panel in all_panels(dashboard["panels"])
    }
    for prefix, fragments in REQUIRED_PANELS.items():
        matches = [title for title in by_title if title.startswith(prefix)]
        assert len(matches) == 1, f"{prefix!r}: {matches}"
        exprs = by_title[matches[0]]
        for fragment in fragments:
            assert fragment in exprs, f"{matches[0]!r} lacks {fragment!r}"


def test_ece_panel_repeats_per_cohort(dashboard: dict[str, Any]) -> None:
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("ECE with 95% interval")]
    assert panel["repeat"] == "cohort"
    assert all('cohort="$cohort"' in t["expr"] for t in panel["targets"][:3])


def test_reliability_is_pointed_to_not_exported(dashboard: dict[str, Any]) -> None:
    texts = [p for p in all_panels(dashboard["panels"]) if p["type"] == "text"]
    (panel,) = [p for p in texts if "Reliability" in p["title"]]
    content = panel["options"]["content"]
    assert "GET /v1/models/$model/calibration" in content
    assert "/ui/models/$model" in content
    # No per-bin series anywhere: the reliability table belongs to the JSON API (STYLE.md, 9).
    assert not any("bin" in name for name in metric_names("\n".join(promql(dashboard))))


def test_datasource_provisioning() -> None:
    text = (PROVISIONING / "datasources" / "prometheus.yml").read_text()
    assert re.search(r"^apiVersion: 1$", text, re.MULTILINE)
    assert re.search(r"^\s*type: prometheus$", text, re.MULTILINE)
    assert re.search(r"^\s*url: http://prometheus:9090$", text, re.MULTILINE)
    assert re.search(r"^\s*isDefault: true$", text, re.MULTILINE)


def test_dashboard_provisioning() -> None:
    text = (PROVISIONING / "dashboards" / "calmon.yml").read_text()
    assert re.search(r"^apiVersion: 1$", text, re.MULTILINE)
    assert re.search(r"^\s*type: file$", text, re.MULTILINE)
    match = re.search(r"^\s*path: (\S+)$", text, re.MULTILINE)
    assert match, text
    # The mount the comment documents puts the dashboard JSON under the provider's path.
    assert f"{match.group(1)}/{DASHBOARD.name}" in text
