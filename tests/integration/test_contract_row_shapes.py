"""A stored contract field of the wrong shape, written around the service, is an unreadable
contract wherever it is read: flagged in listings, 409 ``unreadable_contract`` on its own
routes, an HTML 409 page on /ui, a failed model (not a failed cycle) in the refresher, and
never a 500 or a field read as something else.

Each case stores well-formed JSON of the wrong shape in one JSON column of one contract with a
raw UPDATE (both backends accept it: it is JSON), next to a good contract of another model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from service.common.clock import utcnow
from service.common.values import format_timestamp
from service.db.database import Database
from service.export.refresher import refresh_all
from tests.integration.conftest import Auth, assert_envelope
from tests.integration.factories import fit_body
from tests.integration.test_stream import ok, post

#: The contract columns that hold JSON.
JSON_FIELDS = ("classes", "calibrator", "data_window", "split", "bin_edges", "baseline", "policy")
#: Shapes of well-formed JSON, the same for every field (``wrong_elements`` is built from the
#: field's stored value).
SHAPES: dict[str, Any] = {
    "number": 1,
    "string": "abc",
    "object": {},
    "array": [1, 2],
    "null": None,
    "wrong_elements": ...,
}


def wrong_elements(value: Any) -> Any:
    """``value`` with each element (of a list) or member (of an object) of another JSON type."""

    def other(v: Any) -> Any:
        return 1 if isinstance(v, str) else "x"

    if isinstance(value, list):
        return [other(v) for v in value]
    assert isinstance(value, dict)
    return {k: other(v) for k, v in value.items()}


def damaged(client: FlaskClient, auth: Auth, db: Database, field: str, shape: str) -> str:
    """Fit ``good`` and ``bad``, then store ``shape`` in ``bad``'s ``field``; return its id."""
    ok(post(client, auth, "/v1/contracts/fit", fit_body("good"), role="admin"))
    bad = ok(post(client, auth, "/v1/contracts/fit", fit_body("bad"), role="admin"))
    value = wrong_elements(bad[field]) if shape == "wrong_elements" else SHAPES[shape]
    with db.engine.begin() as connection:
        connection.execute(
            text(f"UPDATE contracts SET {field} = :v WHERE id = :id"),
            {"v": json.dumps(value), "id": bad["id"]},
        )
    contract_id: str = bad["id"]
    return contract_id


def refused(response: Any, contract_id: str) -> None:
    error = assert_envelope(response, 409, "unreadable_contract")
    assert contract_id in error["message"]
    assert error["details"], "the details name the field"


def refused_page(response: Any) -> None:
    assert response.status_code == 409, response.get_data(as_text=True)[:500]
    assert response.mimetype == "text/html"
    assert "unreadable contract" in response.get_data(as_text=True)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("field", JSON_FIELDS)
def test_a_contract_field_of_the_wrong_shape_is_unreadable_everywhere(
    app: Flask, client: FlaskClient, auth: Auth, db: Database, field: str, shape: str
) -> None:
    bad = damaged(client, auth, db, field, shape)
    headers = auth.headers()

    listing = ok(client.get("/v1/contracts", headers=headers))
    assert [c["model"] for c in listing["contracts"]] == ["good"]
    (flagged,) = listing["unreadable"]
    assert (flagged["id"], flagged["model"]) == (bad, "bad")
    assert field in flagged["problem"]
    now = format_timestamp(utcnow())
    active = ok(client.get(f"/v1/contracts?active_at={now}", headers=headers))
    assert [u["id"] for u in active["unreadable"]] == [bad]

    refused(client.get(f"/v1/contracts/{bad}", headers=headers), bad)
    refused(client.get("/v1/models/bad/contract", headers=headers), bad)
    refused(client.get("/v1/models/bad/calibration?window=24h", headers=headers), bad)
    refused(client.post("/v1/gate", json={"contract_id": bad}, headers=headers), bad)
    for url in (
        f"/v1/contracts/{bad}/reliability.svg",
        "/v1/models/bad/reliability.svg",
        "/v1/models/bad/history",
        "/v1/models/bad/history.svg",
    ):
        refused(client.get(url, headers=headers), bad)
    assert ok(client.get(f"/v1/contracts/{bad}/verify", headers=headers))["valid"] is False
    assert client.get("/v1/models/bad/cohorts", headers=headers).status_code == 200

    refused_page(client.get("/ui/models/bad", headers=headers))
    refused_page(client.get(f"/ui/contracts/{bad}", headers=headers))
    fleet = client.get("/ui", headers=headers)
    assert fleet.status_code == 200
    assert 'id="unreadable-contracts"' in fleet.get_data(as_text=True)

    report = refresh_all(db, app.config["CALMON_SETTINGS"])
    assert report.failed == ("bad",), "the other models are refreshed"
    assert client.get("/metrics").status_code == 200
