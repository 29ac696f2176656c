"""Reading and schema-checking the Kubernetes manifests in deploy/kubernetes.

Built-in kinds are validated with ``kubernetes-validate``, which bundles the JSON schemas of the
Kubernetes API (strict: an unknown field is an error, as with ``kubectl apply``'s default
server-side field validation). The Prometheus Operator's ServiceMonitor and PrometheusRule are
validated against the openAPIV3Schema of their CustomResourceDefinitions (a subset vendored in
``schemas/``, see the note there), made strict the same way; their ``metadata`` is checked as
the ObjectMeta it is.

``prometheusrule.yaml`` is generated from deploy/prometheus/rules/calmon.rules.yml; regenerate
it after editing the rules with::

    .venv/bin/python -m tests.deploy.manifests
"""

from __future__ import annotations

import copy
import functools
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.deploy import DEPLOY, ROOT

KUBERNETES = DEPLOY / "kubernetes"
RULES = DEPLOY / "prometheus" / "rules" / "calmon.rules.yml"
PROMETHEUS_RULE = KUBERNETES / "prometheusrule.yaml"
CRDS = Path(__file__).resolve().parent / "schemas" / "monitoring.coreos.com.crds.yaml"

# The oldest Kubernetes the manifests claim to work with, and the newest the package knows.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Return the YAML documents of ``path`` (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifest_files() -> list[Path]:
    """Every Kubernetes manifest in deploy/kubernetes (kustomization.yaml is kustomize's)."""
    return sorted(p for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for crd in load_documents(CRDS):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            schemas[(api_version, kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


def strict(schema: Any) -> Any:
    """Return ``schema`` with ``additionalProperties: false`` on every object that lists its
    ``properties`` and says nothing about others (what the API server prunes or rejects)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def validate_custom_resource(document: dict[str, Any]) -> None:
    """Validate a ServiceMonitor or PrometheusRule; raise ``jsonschema.ValidationError``."""
    key = (document.get("apiVersion", ""), document.get("kind", ""))
    schema = _crd_schemas().get(key)
    if schema is None:
        raise LookupError(f"no CRD schema for {key} in {CRDS.name}")
    jsonschema.Draft202012Validator(strict(schema)).validate(document)
    # The CRD types metadata as a bare object; the API server checks it as ObjectMeta.
    carrier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": document.get("metadata")}
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(carrier, version, strict=True)


def validate_manifest(document: dict[str, Any]) -> None:
    """Validate one manifest against its schema, for every version in ``KUBERNETES_VERSIONS``.

    Raises ``jsonschema.ValidationError`` (``kubernetes_validate.ValidationError`` is one) on a
    schema violation and ``LookupError`` for a kind no schema is known for.
    """
    if (document.get("apiVersion", ""), document.get("kind", "")) in _crd_schemas():
        validate_custom_resource(document)
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(copy.deepcopy(document), version, strict=True)
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise LookupError(exc.message) from exc


def render_prometheus_rule() -> str:
    """Return prometheusrule.yaml: the rules file, comments included, as a PrometheusRule."""
    header = textwrap.dedent(
        f"""\
        # GENERATED from {RULES.relative_to(ROOT)}: edit that file, then run
        #   .venv/bin/python -m tests.deploy.manifests
        # (tests/deploy/test_kubernetes.py fails while the two differ).
        apiVersion: monitoring.coreos.com/v1
        kind: PrometheusRule
        metadata:
          name: calmon
          namespace: calmon
          labels:
            app.kubernetes.io/name: calmon
            app.kubernetes.io/part-of: calmon
        spec:
        """
    )
    return header + textwrap.indent(RULES.read_text(), "  ")


if __name__ == "__main__":
    PROMETHEUS_RULE.write_text(render_prometheus_rule())
    print(f"wrote {PROMETHEUS_RULE.relative_to(ROOT)}")
