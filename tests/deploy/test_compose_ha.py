"""docker-compose.ha.yml: valid against the Compose Specification, calmon pointed at both nodes
of the formation in a URL calmon parses, and the formation tuned as the failover tests tune
theirs (no Docker engine runs in CI, so nothing is started)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from service.config import load_settings
from service.db.failover import hosts_of
from tests.deploy import DEPLOY, ROOT
from tests.deploy.conftest import parse_calmon, repo_path, subcommand
from tests.deploy.test_compose import compose_spec_errors, environment, substituted
from tests.support.formation import MONITOR_SETTINGS, NODE_SETTINGS

COMPOSE_HA = ROOT / "docker-compose.ha.yml"
NODE_SCRIPT = DEPLOY / "pg_auto_failover" / "node.sh"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE_HA.read_text())
    return document["services"]


def test_the_ha_compose_file_matches_the_compose_specification() -> None:
    errors = compose_spec_errors(COMPOSE_HA)
    assert not errors, json.dumps(errors, indent=2)


def test_calmon_names_both_nodes_and_asks_for_the_writable_one(
    services: dict[str, dict[str, Any]],
) -> None:
    nodes = {name for name, s in services.items() if s.get("command", [None])[0] == "postgres"}
    assert nodes == {"node1", "node2"}
    for name in ("migrate", "calmon"):
        env = {k: substituted(v) for k, v in environment(services[name]).items()}
        settings = load_settings(environ=env)
        url = make_url(settings.database_url)
        assert hosts_of(url) == 2
        assert {h.split(":")[0] for h in url.query["host"]} == nodes
        assert url.query["target_session_attrs"] == "read-write"
    assert subcommand(parse_calmon(services["calmon"]["command"])) == "serve"
    assert subcommand(parse_calmon(services["migrate"]["command"])) == "migrate"
    assert services["calmon"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }


def test_the_formation_is_tuned_as_the_failover_tests_tune_theirs(
    services: dict[str, dict[str, Any]],
) -> None:
    script = NODE_SCRIPT.read_text()
    written = dict(re.findall(r"^(\w+(?:\.\w+)?) = '?([^'\n]+)'?$", script, re.MULTILINE))
    assert written == {**MONITOR_SETTINGS, **NODE_SETTINGS}
    for name in ("monitor", "node1", "node2"):
        assert repo_path(services[name]["build"]).joinpath("Dockerfile").is_file()
