"""Every JSON reply of every route matches its documented schema with no undocumented key.

Routes serialise through their reply declarations, which forbid undeclared keys. The parts of a
reply that repeat a request body (a contract's calibrator, baseline and policy) are typed there
as objects and published with the body's schema; this check forbids keys those schemas do not
list too. A scenario drives each route to its success replies (multiclass and binary contracts,
predictions and labels in two cohorts, readings, history, gate, audit), on SQLite and on
PostgreSQL, and every operation with a JSON success reply must have been checked.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import numpy as np
import pytest
from flask.testing import FlaskClient

from service.web.routes import api_document
from tests.integration.conftest import Auth
from tests.integration.factories import binary_fit_body, fit_body, registration_body

JSON = "application/json"


def forbid_extra_keys(node: Any) -> Any:
    """A copy of a schema in which every object that lists its properties allows no others."""
    if isinstance(node, list):
        return [forbid_extra_keys(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {key: forbid_extra_keys(value) for key, value in node.items()}
    if "properties" in node and "additionalProperties" not in node:
        out["properties"] = {k: forbid_extra_keys(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False
    return out


class Replies:
    """Checks replies against the strict document and remembers which operations it saw."""

    def __init__(self) -> None:
        doc = api_document()
        self.paths = doc["paths"]
        self.components = forbid_extra_keys(doc["components"])
        self.seen: set[tuple[str, str, str]] = set()
        self.errors: list[str] = []

    def check(self, method: str, template: str, response: Any) -> dict[str, Any]:
        status = str(response.status_code)
        assert response.status_code < 300, (method, template, response.get_data(as_text=True))
        reply = self.paths[template][method]["responses"][status]
        schema = forbid_extra_keys(reply["content"][JSON]["schema"])
        body = response.get_json()
        validator = jsonschema.Draft202012Validator({**schema, "components": self.components})
        for error in validator.iter_errors(body):
            where = "/".join(map(str, error.absolute_path))
            self.errors.append(f"{method.upper()} {template} {status} at /{where}: {error.message}")
        self.seen.add((method, template, status))
        return body

    def documented_json_successes(self) -> set[tuple[str, str, str]]:
        return {
            (method, template, status)
            for template, operations in self.paths.items()
            for method, operation in operations.items()
            for status, reply in operation["responses"].items()
            if status.startswith("2") and JSON in reply.get("content", {})
        }


def stamp(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def stream(client: FlaskClient, auth: Auth, replies: Replies, model: str, binary: bool) -> None:
    """Forty labeled predictions in two regions over the last hour, and one waiting label."""
    rng = np.random.default_rng(7)
    now = datetime.now(UTC)
    items = []
    for i in range(40):
        item: dict[str, Any] = {
            "id": f"{model}-{i}",
            "ts": stamp(now - timedelta(minutes=50) + timedelta(seconds=60 * i)),
            "cohort": {"region": "emea" if i % 2 else "apac"},
        }
        if binary:
            item["score"] = float(rng.uniform(0.05, 0.95))
        else:
            item["logits"] = rng.normal(size=3).round(3).tolist()
        items.append(item)
    headers = auth.headers("ingest")
    response = client.post(
        "/v1/predictions", json={"model": model, "predictions": items}, headers=headers
    )
    replies.check("post", "/v1/predictions", response)
    classes = ["stay", "churn"] if binary else ["a", "b", "c"]
    labels = [
        {"id": f"{model}-{i}", "label": classes[i % len(classes)], "ts": stamp(now)}
        for i in range(40)
    ]
    labels.append({"id": f"{model}-later", "label": classes[0], "ts": stamp(now)})
    response = client.post("/v1/labels", json={"model": model, "labels": labels}, headers=headers)
    replies.check("post", "/v1/labels", response)


def test_every_reply_carries_only_documented_keys(client: FlaskClient, auth: Auth) -> None:
    replies = Replies()
    admin = auth.headers()
    fit = client.post("/v1/contracts/fit", json=fit_body(), headers=admin)
    fitted = replies.check("post", "/v1/contracts/fit", fit)
    binary = replies.check(
        "post",
        "/v1/contracts/fit",
        client.post("/v1/contracts/fit", json=binary_fit_body("churn"), headers=admin),
    )
    registered = replies.check(
        "post",
        "/v1/contracts",
        client.post("/v1/contracts", json=registration_body(fitted, "glyphs-2"), headers=admin),
    )
    for model, is_binary in (("glyphs", False), ("churn", True)):
        stream(client, auth, replies, model, is_binary)

    get = {
        "/v1/contracts": "/v1/contracts?limit=2",
        "/v1/contracts/{contract_id}": f"/v1/contracts/{fitted['id']}",
        "/v1/contracts/{contract_id}/verify": f"/v1/contracts/{fitted['id']}/verify",
        "/v1/openapi.json": "/v1/openapi.json",
        "/v1/models": "/v1/models?limit=1",
        "/v1/audit/events": "/v1/audit/events?limit=3",
        "/v1/audit/verify": "/v1/audit/verify",
        "/healthz": "/healthz",
        "/readyz": "/readyz",
    }
    for template, url in get.items():
        replies.check("get", template, client.get(url, headers=admin))
    for contract in (fitted, binary):
        model = contract["model"]
        for template, url in {
            "/v1/models/{model}/contract": f"/v1/models/{model}/contract",
            "/v1/models/{model}/cohorts": f"/v1/models/{model}/cohorts",
            "/v1/models/{model}/history": f"/v1/models/{model}/history?start="
            + stamp(datetime.now(UTC) - timedelta(hours=3)),
        }.items():
            replies.check("get", template, client.get(url, headers=admin))
        for query in ("window=1h", "window=24h&cohort=region:emea", "window=1h&cohort=region:xx"):
            url = f"/v1/models/{model}/calibration?{query}"
            replies.check("get", "/v1/models/{model}/calibration", client.get(url, headers=admin))
        decision = replies.check(
            "post",
            "/v1/gate",
            client.post("/v1/gate", json={"contract_id": contract["id"]}, headers=admin),
        )
        assert decision["decision"] in {"pass", "fail"}
    replies.check(
        "get", "/v1/gate/decisions", client.get("/v1/gate/decisions?limit=5", headers=admin)
    )
    retire = {"reason": "superseded by a refit"}
    replies.check(
        "post",
        "/v1/contracts/{contract_id}/retire",
        client.post(f"/v1/contracts/{registered['id']}/retire", json=retire, headers=admin),
    )
    replies.check(
        "get",
        "/v1/contracts/{contract_id}",
        client.get(f"/v1/contracts/{registered['id']}", headers=admin),
    )

    assert replies.errors == [], "\n".join(sorted(set(replies.errors)))
    assert replies.documented_json_successes() - replies.seen == set()


@pytest.mark.parametrize("where", ["top level", "nested object", "list item"])
def test_an_undocumented_key_fails_the_check(client: FlaskClient, auth: Auth, where: str) -> None:
    replies = Replies()
    response = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers())
    body = copy.deepcopy(response.get_json())
    if where == "top level":
        body["surprise"] = 1
    elif where == "nested object":
        body["baseline"]["eval"]["surprise"] = 1
    else:
        body["baseline"]["eval"]["calibrated"]["bins"][0]["surprise"] = 1
    schema = replies.paths["/v1/contracts/fit"]["post"]["responses"]["201"]["content"][JSON]
    strict = {**forbid_extra_keys(schema["schema"]), "components": replies.components}
    messages = [e.message for e in jsonschema.Draft202012Validator(strict).iter_errors(body)]
    assert any("surprise" in m for m in messages), messages
