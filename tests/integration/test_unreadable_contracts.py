"""One contract row that cannot be read back is skipped and flagged, never a failure of every
model's listing or page."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from service.db.database import Database
from tests.integration.conftest import BACKEND, Auth, assert_envelope
from tests.integration.factories import fit_body
from tests.integration.test_stream import ok, post

#: Raw SQL values for ``bin_edges``: valid JSON the spec refuses, and text that is not JSON
#: (only SQLite can hold it: PostgreSQL's ``json`` type refuses it).
CORRUPTIONS = {
    "failing_validation": "'\"oops\"'",
    "unparsable": "'[0, 0.5,'",
}


def _corrupt(client: FlaskClient, auth: Auth, db: Database, how: str) -> dict[str, Any]:
    """Register ``good`` and ``bad``, then damage ``bad``'s contract row with raw SQL."""
    if how == "unparsable" and BACKEND == "postgresql":
        pytest.skip("PostgreSQL's json type refuses text that is not JSON")
    ok(post(client, auth, "/v1/contracts/fit", fit_body("good"), role="admin"))
    bad = ok(post(client, auth, "/v1/contracts/fit", fit_body("bad"), role="admin"))
    with db.session() as session:
        session.execute(
            text(f"UPDATE contracts SET bin_edges = {CORRUPTIONS[how]} WHERE id = :id"),
            {"id": bad["id"]},
        )
        session.commit()
    return bad


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_the_listing_skips_and_flags_an_unreadable_contract(
    client: FlaskClient, auth: Auth, db: Database, how: str
) -> None:
    bad = _corrupt(client, auth, db, how)
    listing = client.get("/v1/contracts", headers=auth.headers())
    assert listing.status_code == 200, listing.get_json()
    body = listing.get_json()
    assert [c["model"] for c in body["contracts"]] == ["good"]
    (flagged,) = body["unreadable"]
    assert (flagged["id"], flagged["model"], flagged["version"]) == (bad["id"], "bad", 1)
    assert flagged["problem"].startswith("bin_edges: ")
    one_model = client.get("/v1/contracts?model=good", headers=auth.headers()).get_json()
    assert [c["model"] for c in one_model["contracts"]] == ["good"]
    assert one_model["unreadable"] == []


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_reading_the_unreadable_contract_is_a_409(
    client: FlaskClient, auth: Auth, db: Database, how: str
) -> None:
    bad = _corrupt(client, auth, db, how)
    for url in (f"/v1/contracts/{bad['id']}", "/v1/models/bad/contract"):
        error = assert_envelope(client.get(url, headers=auth.headers()), 409, "unreadable_contract")
        assert bad["id"] in error["message"]
    verified = ok(client.get(f"/v1/contracts/{bad['id']}/verify", headers=auth.headers()))
    assert verified["valid"] is False
    page = client.get(f"/ui/contracts/{bad['id']}", headers=auth.headers())
    assert page.status_code == 409
    assert "unreadable contract" in page.get_data(as_text=True)


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_the_fleet_page_lists_every_model_and_flags_the_unreadable_one(
    client: FlaskClient, auth: Auth, db: Database, how: str
) -> None:
    _corrupt(client, auth, db, how)
    page = client.get("/ui", headers=auth.headers())
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'data-model="good"' in html and 'data-model="bad"' in html
    assert 'id="unreadable-contracts"' in html
    assert html.count('class="unreadable"') == 1
    note = html.split('id="unreadable-contracts"', 1)[1].split("</p>", 1)[0]
    assert "bad (" in note and "good" not in note
