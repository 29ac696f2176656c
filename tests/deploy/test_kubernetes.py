"""The Kubernetes manifests in deploy/kubernetes: schema-valid, and consistent with the code.

Every document is validated against the Kubernetes API's schemas (``kubernetes-validate``,
strict) or, for ServiceMonitor and PrometheusRule, the Prometheus Operator's CRD schema (see
tests/deploy/manifests.py). Then the manifests are checked against what they deploy: probe
paths are routes of the app, ``CALMON_*`` names are settings whose values parse, container
commands parse with ``calmon``'s own parser, and the Service, ServiceMonitor and
HorizontalPodAutoscaler point at the right objects and ports. The example Ingress routes to the
Service and has ingress-nginx buffer and bound requests as deploy/nginx/calmon.conf does for
docker-compose.yml.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from flask import Flask

from service.config import load_settings
from service.server import GRACEFUL_TIMEOUT_SECONDS, WORKER_TIMEOUT_SECONDS
from tests.deploy import DEPLOY
from tests.deploy.conftest import SETTINGS_ENV, parse_calmon, subcommand
from tests.deploy.manifests import (
    CRDS,
    KUBERNETES,
    PROMETHEUS_RULE,
    RULES,
    load_documents,
    manifest_files,
    render_prometheus_rule,
    validate_manifest,
)
from tests.deploy.nginx import NGINX_CONF, directives, only, seconds, size_bytes

Manifest = dict[str, Any]
# Applied on their own, before the rest (deploy/README.md): not in kustomization.yaml.
APPLIED_SEPARATELY = {"secret.example.yaml", "migrate-job.yaml", "ingress.example.yaml"}


def all_documents() -> list[tuple[str, Manifest]]:
    return [(path.name, doc) for path in manifest_files() for doc in load_documents(path)]


def doc_id(item: tuple[str, Manifest]) -> str:
    name, doc = item
    return f"{name}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def find(kind: str, name: str) -> Manifest:
    found = [d for _, d in all_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def pod_template(workload: Manifest) -> Manifest:
    job = workload["spec"]["jobTemplate"] if workload["kind"] == "CronJob" else workload
    return job["spec"]["template"]


def pod_spec(workload: Manifest) -> Manifest:
    return pod_template(workload)["spec"]


def containers(workload: Manifest) -> list[Manifest]:
    return pod_spec(workload)["containers"]


def workloads() -> list[Manifest]:
    return [d for _, d in all_documents() if d["kind"] in ("Deployment", "Job", "CronJob")]


def api() -> Manifest:
    return find("Deployment", "calmon")


def env_of(container: Manifest) -> dict[str, Manifest]:
    return {item["name"]: item for item in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# --- schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("item", all_documents(), ids=doc_id)
def test_manifest_matches_its_schema(item: tuple[str, Manifest]) -> None:
    validate_manifest(item[1])


def test_every_kind_is_checked() -> None:
    kinds = {doc["kind"] for _, doc in all_documents()}
    assert {
        "Namespace",
        "Secret",
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "Job",
        "CronJob",
        "ServiceMonitor",
        "PrometheusRule",
        "Ingress",
    } <= kinds


def broken(kind: str, name: str, path: list[str | int], change: Any) -> Manifest:
    """A copy of a manifest with the value at ``path`` replaced (``change=None``: removed)."""
    doc = copy.deepcopy(find(kind, name))
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    if change is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = change
    return doc


CONTAINER: list[str | int] = ["spec", "template", "spec", "containers", 0]


@pytest.mark.parametrize(
    ("kind", "name", "path", "change", "message"),
    [
        # An HTTP probe without its port.
        ("Deployment", "calmon", [*CONTAINER, "readinessProbe", "httpGet", "port"], None, "port"),
        # A misspelt field: strict validation, as `kubectl apply` does by default.
        (
            "Deployment",
            "calmon",
            [*CONTAINER, "livenessProbe", "httpGet"],
            {"path": "/healthz", "port": "http", "paht": "/x"},
            "paht",
        ),
        # A port number given as a string where the API wants an integer.
        ("Deployment", "calmon", [*CONTAINER, "ports", 0, "containerPort"], "8000", "integer"),
        ("HorizontalPodAutoscaler", "calmon", ["spec", "maxReplicas"], None, "maxReplicas"),
        ("Service", "calmon", ["spec", "ports", 0, "port"], "8000", "integer"),
        # An Ingress path without its pathType, which networking.k8s.io/v1 requires.
        (
            "Ingress",
            "calmon",
            ["spec", "rules", 0, "http", "paths", 0, "pathType"],
            None,
            "pathType",
        ),
        ("ServiceMonitor", "calmon", ["spec", "endpoints", 0, "intervall"], "15s", "intervall"),
        ("ServiceMonitor", "calmon", ["spec", "selector"], None, "selector"),
        ("ServiceMonitor", "calmon", ["metadata", "lables"], {"a": "b"}, "lables"),
        ("PrometheusRule", "calmon", ["spec", "groups", 1, "rules", 0, "for"], "15 min", "15 min"),
        ("PrometheusRule", "calmon", ["spec", "groups", 0, "name"], None, "name"),
    ],
)
def test_the_schema_check_rejects_a_broken_manifest(
    kind: str, name: str, path: list[str | int], change: Any, message: str
) -> None:
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate_manifest(broken(kind, name, path, change))


def test_a_kind_without_a_schema_is_an_error_not_a_pass() -> None:
    hpa = copy.deepcopy(find("HorizontalPodAutoscaler", "calmon"))
    hpa["apiVersion"] = "autoscaling/v2beta1"  # removed in Kubernetes 1.25
    with pytest.raises(LookupError):
        validate_manifest(hpa)
    monitor = copy.deepcopy(find("ServiceMonitor", "calmon"))
    monitor["apiVersion"] = "monitoring.coreos.com/v1alpha1"
    with pytest.raises(LookupError):
        validate_manifest(monitor)


@pytest.mark.parametrize("crd", load_documents(CRDS), ids=lambda c: c["metadata"]["name"])
def test_the_vendored_crd_subset_is_a_valid_crd(crd: Manifest) -> None:
    validate_manifest(crd)
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    assert crd["metadata"]["name"] == f"{plural}.{group}"


# --- the PrometheusRule and the rules file ----------------------------------------------------


def test_prometheusrule_carries_the_groups_of_the_rules_file() -> None:
    (rule,) = load_documents(PROMETHEUS_RULE)
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_prometheusrule_is_generated_from_the_rules_file() -> None:
    assert PROMETHEUS_RULE.read_text() == render_prometheus_rule(), (
        "deploy/kubernetes/prometheusrule.yaml is stale: run .venv/bin/python -m "
        "tests.deploy.manifests"
    )


# --- consistency with the code ---------------------------------------------------------------


def probes(container: Manifest) -> Iterator[tuple[str, Manifest]]:
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in container:
            yield kind, container[kind]


def container_port(container: Manifest, port: int | str) -> int:
    """A port named or numbered in a probe or Service, as the container's port number."""
    for declared in container.get("ports", []):
        if port in (declared["containerPort"], declared.get("name")):
            return int(declared["containerPort"])
    raise AssertionError(f"port {port!r} is not a port of container {container['name']}")


def test_api_probes_are_routes_on_the_served_port(routes: frozenset[str]) -> None:
    (container,) = containers(api())
    found = dict(probes(container))
    assert found["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert found["readinessProbe"]["httpGet"]["path"] == "/readyz"
    served = parse_calmon(container["command"]).port
    for kind, probe in found.items():
        assert probe["httpGet"]["path"] in routes, kind
        assert container_port(container, probe["httpGet"]["port"]) == served, kind


def test_container_commands_are_calmon_subcommands() -> None:
    ran = {}
    for workload in workloads():
        for container in containers(workload):
            args = parse_calmon(container["command"])
            ran[workload["metadata"]["name"]] = (subcommand(args), getattr(args, "loop", None))
    assert ran == {
        "calmon": ("serve", None),
        "calmon-refresher": ("refresh", True),
        "calmon-migrate": ("migrate", None),
        "calmon-prune": ("prune", None),
    }


def test_api_serves_on_its_container_port_on_all_interfaces() -> None:
    (container,) = containers(api())
    args = parse_calmon(container["command"])
    assert args.host == "0.0.0.0"
    assert [p["containerPort"] for p in container["ports"]] == [args.port]


def configmap_data() -> dict[str, str]:
    return find("ConfigMap", "calmon-config")["data"]


def test_environment_names_are_settings_and_values_parse() -> None:
    data = configmap_data()
    assert set(data) <= SETTINGS_ENV, sorted(set(data) - SETTINGS_ENV)
    for workload in workloads():
        for container in containers(workload):
            env = env_of(container)
            names = {n for n in env if n.startswith("CALMON_")}
            assert names <= SETTINGS_ENV, sorted(names - SETTINGS_ENV)
            # Every literal value, with the ConfigMap's, is a valid configuration.
            literal = {n: env[n]["value"] for n in names if "value" in env[n]}
            uses_config = any(
                source.get("configMapRef", {}).get("name") == "calmon-config"
                for source in container.get("envFrom", [])
            )
            load_settings(environ={**(data if uses_config else {}), **literal})


def test_refresh_runs_in_its_own_deployment_not_in_the_api() -> None:
    (container,) = containers(api())
    setting = env_of(container)["CALMON_REFRESH_IN_SERVICE"]["value"]
    assert load_settings(environ={"CALMON_REFRESH_IN_SERVICE": setting}).refresh_in_service is False
    assert "CALMON_REFRESH_IN_SERVICE" not in configmap_data()  # would apply to every pod
    refresher = find("Deployment", "calmon-refresher")
    assert refresher["spec"]["replicas"] == 1
    assert parse_calmon(containers(refresher)[0]["command"]).loop is True


def test_secrets_are_referenced_never_written_in_a_workload() -> None:
    example = find("Secret", "calmon-secrets")
    assert all("CHANGE-ME" in value for value in example["stringData"].values())
    referenced = set()
    for workload in workloads():
        for container in containers(workload):
            for name, item in env_of(container).items():
                if name in ("CALMON_DATABASE_URL", "CALMON_ADMIN_TOKEN", "CALMON_AUDIT_KEY"):
                    assert "value" not in item, f"{name} written in {workload['metadata']['name']}"
                    ref = item["valueFrom"]["secretKeyRef"]
                    referenced.add((ref["name"], ref["key"]))
    assert referenced == {("calmon-secrets", key) for key in example["stringData"]}


def test_prometheus_multiprocess_dir_is_below_an_emptydir_mount() -> None:
    spec = pod_spec(api())
    (container,) = spec["containers"]
    directory = PurePosixPath(env_of(container)["PROMETHEUS_MULTIPROC_DIR"]["value"])
    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    mounts = [
        PurePosixPath(m["mountPath"]) for m in container["volumeMounts"] if m["name"] in empty_dirs
    ]
    # Strictly below: calmon deletes and recreates the directory, and a mount point cannot go.
    assert any(mount in directory.parents for mount in mounts), (directory, mounts)


def test_read_only_root_filesystem_has_a_writable_tmp() -> None:
    for workload in workloads():
        spec = pod_spec(workload)
        empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for container in spec["containers"]:
            if container["securityContext"].get("readOnlyRootFilesystem"):
                tmp = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
                assert tmp and tmp[0]["name"] in empty_dirs, workload["metadata"]["name"]


def test_every_container_is_unprivileged_and_bounded() -> None:
    for workload in workloads():
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound])


def test_shutdown_grace_outlasts_gunicorns_drain() -> None:
    assert pod_spec(api())["terminationGracePeriodSeconds"] > GRACEFUL_TIMEOUT_SECONDS


def test_service_routes_to_the_api_pods_only() -> None:
    service, deployment = find("Service", "calmon"), api()
    selector = service["spec"]["selector"]
    for workload in workloads():
        # Not the refresher's, the migration's or the prune's pods: they serve no HTTP.
        labels = pod_template(workload)["metadata"]["labels"]
        name = workload["metadata"]["name"]
        assert selects(selector, labels) == (name == deployment["metadata"]["name"]), name
    (container,) = containers(deployment)
    (port,) = service["spec"]["ports"]
    assert container_port(container, port["targetPort"]) == port["port"]


def test_servicemonitor_scrapes_the_service_as_job_calmon(calmon_app: Flask) -> None:
    monitor, service = find("ServiceMonitor", "calmon"), find("Service", "calmon")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert "namespaceSelector" not in monitor["spec"]  # its own namespace, the Service's
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        # Open: no credentials needed (and none configured).
        assert calmon_app.test_client().get(endpoint["path"]).status_code == 200
        assert not {"authorization", "bearerTokenSecret", "basicAuth"} & set(endpoint)
    # Without jobLabel the job is the Service's name; the alert rules select up{job="calmon"}.
    assert "jobLabel" not in monitor["spec"]
    assert 'up{job="calmon"}' in RULES.read_text()
    assert service["metadata"]["name"] == "calmon"


def test_hpa_scales_the_api_deployment_on_cpu() -> None:
    hpa, deployment = find("HorizontalPodAutoscaler", "calmon"), api()
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        deployment["apiVersion"],
        deployment["kind"],
        deployment["metadata"]["name"],
    )
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    # Utilization is relative to the request; replicas belong to the autoscaler alone.
    assert all("cpu" in c["resources"]["requests"] for c in containers(deployment))
    assert "replicas" not in deployment["spec"]
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_everything_lives_in_one_namespace() -> None:
    (namespace,) = [d for _, d in all_documents() if d["kind"] == "Namespace"]
    for name, doc in all_documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], name


def test_every_workload_runs_the_same_image() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    images = {c["image"] for w in workloads() for c in containers(w)}
    (image,) = kustomization["images"]
    assert images == {f"{image['newName']}:{image['newTag']}"}
    assert {i.split(":")[0] for i in images} == {image["name"]}


def test_kustomization_applies_all_but_the_secret_example_and_the_job() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources))
    assert set(resources) == {p.name for p in manifest_files()} - APPLIED_SEPARATELY
    assert kustomization["namespace"] == find("Namespace", "calmon")["metadata"]["name"]


# --- the example Ingress: ingress-nginx as the buffering proxy ---------------------------------

INGRESS_NGINX = "nginx.ingress.kubernetes.io/"
#: deploy/nginx/calmon.conf's directives, where the compose proxy passes requests to calmon.
PROXIED = ("server", "location /")


def ingress_annotations() -> dict[str, str]:
    annotations: dict[str, str] = find("Ingress", "calmon")["metadata"]["annotations"]
    assert all(key.startswith(INGRESS_NGINX) for key in annotations), sorted(annotations)
    return {key.removeprefix(INGRESS_NGINX): value for key, value in annotations.items()}


def test_ingress_routes_everything_to_the_api_service() -> None:
    ingress, service = find("Ingress", "calmon"), find("Service", "calmon")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    port_names = {p["name"] for p in service["spec"]["ports"]}
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    backend = path["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in port_names
    # The Service stays inside the cluster: the Ingress is the only way in.
    assert service["spec"]["type"] == "ClusterIP"


def test_ingress_buffers_and_bounds_requests_as_the_compose_proxy_does() -> None:
    annotations = ingress_annotations()
    conf = directives(NGINX_CONF.read_text())
    limit = load_settings(environ=configmap_data()).max_body_bytes
    assert size_bytes(annotations["proxy-body-size"]) == limit, "not CALMON_MAX_BODY_BYTES"
    assert size_bytes(only(conf, "client_max_body_size").args[0]) == limit
    assert annotations["client-body-buffer-size"] == only(conf, "client_body_buffer_size").args[0]
    assert annotations["proxy-request-buffering"] == "on"
    assert annotations["proxy-buffering"] == "on"
    for key in ("proxy-connect-timeout", "proxy-send-timeout", "proxy-read-timeout"):
        directive = only(conf, key.replace("-", "_"), PROXIED)
        assert int(annotations[key]) == seconds(directive.args[0]), key  # bare seconds here
    assert int(annotations["proxy-read-timeout"]) > WORKER_TIMEOUT_SECONDS


def test_readme_gives_the_controller_the_compose_proxys_client_timeouts() -> None:
    """client-header-timeout and client-body-timeout are keys of the controller's ConfigMap, not
    Ingress annotations: the deployment guide gives them, with deploy/nginx/calmon.conf's
    values."""
    readme = (DEPLOY / "README.md").read_text()
    conf = directives(NGINX_CONF.read_text())
    for key in ("client-header-timeout", "client-body-timeout"):
        value = seconds(only(conf, key.replace("-", "_")).args[0])
        assert f'{key}: "{value:g}"' in readme, f"deploy/README.md does not give {key}: {value:g}"
