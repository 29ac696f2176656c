"""The list routes page alike: ``limit`` rows a page, and a ``next_cursor`` until the last page,
which has none (also when the listing fills its last page exactly)."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.integration.conftest import Auth
from tests.integration.factories import fit_body


def fitted(client: FlaskClient, auth: Auth, model: str = "glyphs") -> dict[str, Any]:
    response = client.post("/v1/contracts/fit", json=fit_body(model), headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def walk(client: FlaskClient, auth: Auth, url: str, key: str) -> tuple[list[Any], list[int]]:
    """Every item of a JSON listing, following ``next_cursor``; and the size of each page."""
    items: list[Any] = []
    sizes: list[int] = []
    cursor = None
    while True:
        response = client.get(url + (f"&cursor={cursor}" if cursor else ""), headers=auth.headers())
        assert response.status_code == 200, response.get_json()
        page = response.get_json()
        items += page[key]
        sizes.append(len(page[key]))
        cursor = page["next_cursor"]
        if cursor is None:
            return items, sizes


@pytest.mark.parametrize(("limit", "sizes"), [(2, [2, 2]), (3, [3, 1]), (4, [4]), (5, [4])])
def test_gate_decisions_page_newest_first(
    client: FlaskClient, auth: Auth, limit: int, sizes: list[int]
) -> None:
    contract = fitted(client, auth)
    ids = []
    for _ in range(4):
        response = client.post(
            "/v1/gate", json={"contract_id": contract["id"]}, headers=auth.headers()
        )
        assert response.status_code == 201, response.get_json()
        ids.append(response.get_json()["id"])
    url = f"/v1/gate/decisions?model=glyphs&limit={limit}"
    decisions, seen_sizes = walk(client, auth, url, "decisions")
    assert [d["id"] for d in decisions] == ids[::-1]
    assert seen_sizes == sizes


@pytest.mark.parametrize(("limit", "sizes"), [(2, [2, 2]), (3, [3, 1]), (5, [4])])
def test_contracts_page_newest_first(
    client: FlaskClient, auth: Auth, limit: int, sizes: list[int]
) -> None:
    ids = [fitted(client, auth, model=f"m{i}")["id"] for i in range(4)]
    contracts, seen_sizes = walk(client, auth, f"/v1/contracts?limit={limit}", "contracts")
    assert [c["id"] for c in contracts] == ids[::-1]
    assert seen_sizes == sizes


def test_audit_events_page_oldest_first_as_json_and_as_csv(client: FlaskClient, auth: Auth) -> None:
    for i in range(3):
        fitted(client, auth, model=f"m{i}")
    every = client.get("/v1/audit/events?limit=1000", headers=auth.headers()).get_json()
    assert every["next_cursor"] is None
    seqs = [e["seq"] for e in every["events"]]
    assert seqs == sorted(seqs) and len(seqs) >= 3
    events, sizes = walk(client, auth, "/v1/audit/events?limit=2", "events")
    assert [e["seq"] for e in events] == seqs
    assert sizes == [2] * (len(seqs) // 2) + ([len(seqs) % 2] if len(seqs) % 2 else [])

    rows: list[dict[str, str]] = []
    cursor = None
    while True:
        url = "/v1/audit/events?format=csv&limit=2" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(url, headers=auth.headers())
        assert response.status_code == 200
        rows += csv.DictReader(io.StringIO(response.get_data(as_text=True)))
        cursor = response.headers.get("X-Next-Cursor")
        if cursor is None:
            break
    assert [int(r["seq"]) for r in rows] == seqs
