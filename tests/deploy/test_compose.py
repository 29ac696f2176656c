"""docker-compose.yml: valid against the Compose Specification, and consistent with the code.

No Docker engine runs in CI, so nothing is started: the file is validated with the Compose
Specification's JSON schema (the copy ``check-jsonschema`` ships as ``vendor.compose-spec``),
then checked against what it deploys: the ``calmon`` commands parse with the CLI's parser, the
``CALMON_*`` variables are settings and their values parse, Prometheus scrapes the port calmon
serves on, the database URL names the PostgreSQL service, every mounted path exists, and nginx
(deploy/nginx/calmon.conf) is the only way in to calmon: it passes to the port calmon serves on,
refuses bodies over calmon's own limit in calmon's error envelope, and reads whole requests
within its client timeouts before gunicorn sees them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml
from flask import Flask

from service.config import load_settings
from service.server import WORKER_TIMEOUT_SECONDS
from tests.deploy import DEPLOY, ROOT
from tests.deploy.conftest import SETTINGS_ENV, parse_calmon, repo_path, subcommand
from tests.deploy.nginx import NGINX_CONF, Directive, directives, only, seconds, size_bytes

COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
GRAFANA_DATASOURCE = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


def compose_spec_errors(path: Path) -> list[dict[str, Any]]:
    """Validate ``path`` with check-jsonschema's vendored Compose Specification schema."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            "--output-format",
            "JSON",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(result.stdout)
    assert (result.returncode == 0) == (report["status"] == "ok"), result.stderr
    errors: list[dict[str, Any]] = report.get("errors", []) + report.get("parse_errors", [])
    return errors


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def calmon_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run this repository's image (built from its Dockerfile)."""
    return {name: s for name, s in services.items() if s.get("build") in (".", "./")}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def substituted(value: str) -> str:
    """``value`` with ``${VAR...}`` interpolations replaced by a plausible string."""
    return INTERPOLATION.sub("interpolated", value)


def test_compose_file_matches_the_compose_specification() -> None:
    errors = compose_spec_errors(COMPOSE)
    assert not errors, json.dumps(errors, indent=2)


@pytest.mark.parametrize(
    ("broken", "replacement", "where"),
    [
        # An unknown key (a typo of `command`).
        (
            '    command: ["calmon", "migrate"]',
            '    comand: ["calmon", "migrate"]',
            "$.services.migrate",
        ),
        # A depends_on condition the specification does not define.
        (
            "condition: service_completed_successfully",
            "condition: service_completed",
            "$.services.calmon.depends_on",
        ),
        # A port mapping that is neither a string nor a port object.
        ('      - "127.0.0.1:8000:8000"', "      - [8000]", "$.services.nginx.ports[0]"),
    ],
)
def test_the_schema_check_rejects_a_broken_compose_file(
    tmp_path: Path, broken: str, replacement: str, where: str
) -> None:
    text = COMPOSE.read_text()
    assert broken in text
    path = tmp_path / "docker-compose.yml"
    path.write_text(text.replace(broken, replacement, 1))
    assert where in {error["path"] for error in compose_spec_errors(path)}


def test_calmon_commands_are_real_subcommands(services: dict[str, dict[str, Any]]) -> None:
    ran = {
        name: subcommand(parse_calmon(s["command"]))
        for name, s in services.items()
        if name in calmon_services(services)
    }
    assert ran == {"migrate": "migrate", "calmon": "serve"}


def test_migrations_run_before_the_service(services: dict[str, dict[str, Any]]) -> None:
    assert "healthcheck" in services["postgres"]
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert services["calmon"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }
    assert services["calmon"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    # A one-shot: restarting it after success would keep `calmon` waiting forever.
    assert services["migrate"].get("restart", "no") == "no"
    # Both run the same build, so the migrations applied are the ones the service expects.
    assert services["migrate"]["build"] == services["calmon"]["build"]
    assert services["migrate"]["image"] == services["calmon"]["image"]


def test_calmon_environment_is_settings_that_parse(services: dict[str, dict[str, Any]]) -> None:
    for name, service in calmon_services(services).items():
        env = environment(service)
        calmon_vars = {key for key in env if key.startswith("CALMON_")}
        assert calmon_vars, name
        unknown = calmon_vars - SETTINGS_ENV
        assert not unknown, f"{name}: {sorted(unknown)} are not settings in service/config.py"
        # The values are valid too (load_settings raises naming the variable otherwise).
        load_settings(environ={key: substituted(env[key]) for key in calmon_vars})


def test_database_url_names_the_postgres_service(services: dict[str, dict[str, Any]]) -> None:
    postgres = environment(services["postgres"])
    for name, service in calmon_services(services).items():
        url = urlsplit(environment(service)["CALMON_DATABASE_URL"])
        assert url.scheme == "postgresql", name
        assert url.hostname == "postgres" and url.hostname in services, name
        assert url.port == 5432, name
        assert url.username == postgres["POSTGRES_USER"], name
        assert url.password == postgres["POSTGRES_PASSWORD"], name
        assert url.path == f"/{postgres['POSTGRES_DB']}", name


def test_prometheus_scrapes_the_port_calmon_serves_on(
    services: dict[str, dict[str, Any]], calmon_app: Flask
) -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "calmon"]
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets
    serve = parse_calmon(services["calmon"]["command"])
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert host in services, f"{target}: no compose service {host!r}"
        assert host == "calmon"
        assert int(port) == serve.port, f"{target}: calmon serves on {serve.port}"
    assert serve.host == "0.0.0.0"  # reachable from the prometheus container
    # /metrics answers without a token, so the scrape config carries no credentials.
    path = job.get("metrics_path", "/metrics")
    assert calmon_app.test_client().get(path).status_code == 200
    assert not {"authorization", "bearer_token", "bearer_token_file", "basic_auth"} & set(job)


def test_grafana_datasource_points_at_the_prometheus_service(
    services: dict[str, dict[str, Any]],
) -> None:
    (datasource,) = yaml.safe_load(GRAFANA_DATASOURCE.read_text())["datasources"]
    url = urlsplit(datasource["url"])
    assert url.hostname in services and services[url.hostname]["image"].startswith(
        "prom/prometheus:"
    )
    assert f"{url.port}:{url.port}" in " ".join(services[url.hostname]["ports"])


def mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(repository path, container path) of the service's bind mounts of repository files."""
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out.append((repo_path(source), target))
    return out


def host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """The repository file a container path of ``service`` is mounted from, if any."""
    for source, target in mounts(service):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / container_path[len(target) :].lstrip("/")
    return None


def test_mounted_paths_exist(services: dict[str, dict[str, Any]]) -> None:
    seen = 0
    for name, service in services.items():
        for source, _ in mounts(service):
            assert source.exists(), f"{name} mounts {source.relative_to(ROOT)}, which is missing"
            seen += 1
    assert seen >= 3


def test_prometheus_loads_the_repository_config_and_rules(
    services: dict[str, dict[str, Any]],
) -> None:
    prometheus = services["prometheus"]
    (flag,) = [arg for arg in prometheus["command"] if arg.startswith("--config.file=")]
    config = host_path(prometheus, flag.split("=", 1)[1])
    assert config == PROMETHEUS_CONFIG.resolve()
    rule_globs = yaml.safe_load(config.read_text())["rule_files"]
    assert any(list(config.parent.glob(pattern)) for pattern in rule_globs)


def test_grafana_mounts_the_provisioning_and_the_dashboard_where_the_provider_looks(
    services: dict[str, dict[str, Any]],
) -> None:
    grafana = services["grafana"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning")
    assert provisioning == (DEPLOY / "grafana" / "provisioning").resolve()
    provider = yaml.safe_load((provisioning / "dashboards" / "calmon.yml").read_text())
    (options,) = [p["options"] for p in provider["providers"]]
    dashboard = host_path(grafana, f"{options['path']}/calmon-dashboard.json")
    assert dashboard == (DEPLOY / "grafana" / "calmon-dashboard.json").resolve()


def postgres_settings(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The ``-c name=value`` pairs the compose file starts PostgreSQL with."""
    command = services["postgres"]["command"]
    assert command[0] == "postgres" and all(flag == "-c" for flag in command[1::2])
    return dict(pair.split("=", 1) for pair in command[2::2])


@pytest.mark.skipif(
    not os.environ.get("CALMON_TEST_DATABASE_URL"), reason="needs PostgreSQL (.ci/run sets it)"
)
def test_postgres_settings_are_real_and_documented(services: dict[str, dict[str, Any]]) -> None:
    """Every setting exists in PostgreSQL 15 with a value of its type, and the operations guide
    gives the same value for a managed database."""
    settings = postgres_settings(services)
    assert {"shared_buffers", "max_wal_size", "checkpoint_timeout", "work_mem"} <= set(settings)
    with psycopg.connect(os.environ["CALMON_TEST_DATABASE_URL"]) as conn:
        for name, value in settings.items():
            row = conn.execute(
                "SELECT vartype, unit, enumvals FROM pg_settings WHERE name = %s", (name,)
            ).fetchone()
            assert row, f"{name} is not a PostgreSQL setting"
            vartype, unit, enumvals = row
            if vartype == "enum":
                assert value in enumvals, (name, value)
            elif vartype == "bool":
                assert value in ("on", "off"), (name, value)
            elif unit in ("8kB", "kB", "MB"):
                assert conn.execute("SELECT pg_size_bytes(%s) > 0", (value,)).fetchone() == (True,)
            else:
                assert conn.execute("SELECT %s::interval > '0'", (value,)).fetchone() == (True,)
    guide = (ROOT / "docs" / "operations.md").read_text()
    for name, value in settings.items():
        assert f"`{name}={value}`" in guide, f"docs/operations.md does not give {name}={value}"


# --- nginx, the only way in to calmon ---------------------------------------------------------

#: Where deploy/nginx/calmon.conf passes requests on to calmon.
PROXIED = ("server", "location /")


@pytest.fixture(scope="module")
def proxy_conf() -> list[Directive]:
    return directives(NGINX_CONF.read_text())


def published_ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each ``ports`` entry (``ADDR:HOST:CTR``)."""
    out = []
    for entry in service.get("ports", []):
        address, host_port, container_port = str(entry).split(":")
        out.append((address, int(host_port), int(container_port)))
    return out


def test_only_nginx_publishes_calmon(
    services: dict[str, dict[str, Any]], proxy_conf: list[Directive]
) -> None:
    # gunicorn is never reachable from outside: a slow client would hold one of its threads.
    for name, service in calmon_services(services).items():
        assert "ports" not in service, f"{name} publishes a port; only nginx may"
    (listen,) = only(proxy_conf, "listen", ("server",)).args
    assert published_ports(services["nginx"]) == [("127.0.0.1", 8000, int(listen))]
    assert services["nginx"]["image"].startswith("nginx:")
    config = host_path(services["nginx"], "/etc/nginx/conf.d/default.conf")
    assert config == NGINX_CONF.resolve()  # the image's default server, replaced


def test_nginx_passes_to_the_port_calmon_serves_on(
    services: dict[str, dict[str, Any]], proxy_conf: list[Directive]
) -> None:
    (target,) = only(proxy_conf, "proxy_pass", PROXIED).args
    assert target.startswith("http://")
    upstream = target.removeprefix("http://")
    (server,) = only(proxy_conf, "server", (f"upstream {upstream}",)).args
    host, port = server.rsplit(":", 1)
    serve = parse_calmon(services["calmon"]["command"])
    assert host == "calmon" and host in services
    assert int(port) == serve.port and serve.host == "0.0.0.0"
    assert str(serve.port) in [str(p) for p in services["calmon"].get("expose", [])]
    # Started once calmon answers its HEALTHCHECK, restarted when calmon is recreated (nginx
    # resolves the name once, at start).
    assert services["nginx"]["depends_on"]["calmon"] == {
        "condition": "service_healthy",
        "restart": True,
    }


def test_nginx_refuses_what_calmon_refuses_as_calmon_does(
    services: dict[str, dict[str, Any]], proxy_conf: list[Directive], calmon_app: Flask
) -> None:
    env = environment(services["calmon"])
    limit = load_settings(environ={k: substituted(v) for k, v in env.items()}).max_body_bytes
    (size,) = only(proxy_conf, "client_max_body_size", ("server",)).args
    assert size_bytes(size) == limit, "client_max_body_size is not CALMON_MAX_BODY_BYTES"

    # nginx answers a body over its limit itself: with calmon's error envelope, word for word.
    status, location = only(proxy_conf, "error_page", ("server",)).args
    assert status == "413" and location.startswith("@")
    answer = ("server", f"location {location}")
    assert only(proxy_conf, "default_type", answer).args == ("application/json",)
    code, body = only(proxy_conf, "return", answer).args
    assert calmon_app.config["MAX_CONTENT_LENGTH"] == limit
    # calmon's own answer to an over-long body, on a route that reads its body without a token.
    calmons = calmon_app.test_client().post(
        "/ui/sign-in", data=b"x" * (limit + 1), content_type="application/x-www-form-urlencoded"
    )
    assert (int(code), json.loads(body)) == (calmons.status_code, calmons.get_json())


def test_nginx_reads_whole_requests_before_gunicorn_sees_them(proxy_conf: list[Directive]) -> None:
    # A client has this long to send its header, and may pause this long within its body.
    for name in ("client_header_timeout", "client_body_timeout"):
        (value,) = only(proxy_conf, name, ("server",)).args
        assert 0 < seconds(value) <= 60, name
    assert only(proxy_conf, "proxy_request_buffering", PROXIED).args == ("on",)
    assert only(proxy_conf, "proxy_buffering", PROXIED).args == ("on",)
    for name in ("proxy_connect_timeout", "proxy_send_timeout"):
        (value,) = only(proxy_conf, name, PROXIED).args
        assert 0 < seconds(value) <= 60, name
    # gunicorn kills a worker silent for WORKER_TIMEOUT_SECONDS; nginx waits longer than that, so
    # a long ingest batch is answered rather than cut off by the proxy.
    (read,) = only(proxy_conf, "proxy_read_timeout", PROXIED).args
    assert seconds(read) > WORKER_TIMEOUT_SECONDS


def test_nginx_sets_the_forwarded_headers(proxy_conf: list[Directive]) -> None:
    headers = {
        d.args[0].lower(): d.args[1]
        for d in proxy_conf
        if d.name == "proxy_set_header" and d.context == PROXIED
    }
    assert headers["x-forwarded-for"] == "$remote_addr"  # the edge: a client's own is dropped
    assert headers["x-forwarded-proto"] == "$scheme"
    assert headers["x-forwarded-host"] == headers["host"] == "$http_host"
    assert headers["x-forwarded-port"] == "$server_port"
