"""``GET /v1/models``: the fleet page's models and statuses as JSON, a page at a time (both
backends, through the Flask client)."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from service.db.database import Database
from service.export.refresher import refresh_all
from tests.integration.conftest import Auth, assert_envelope
from tests.integration.test_stream import _multiclass_contract, _send_labels, _send_predictions, ok
from tests.integration.test_ui_pages import overconfident, page


def _all_pages(client: FlaskClient, auth: Auth, limit: int) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        url = f"/v1/models?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = ok(client.get(url, headers=auth.headers("reader")))
        pages.append(body["models"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_models_are_listed_worst_first_with_the_fleet_page_statuses(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    names = ("aaa-calm", "bbb-fresh", "mmm-calm", "zzz-drifting")
    for model in names:
        _multiclass_contract(client, auth, model=model, min_labeled=50)
    for model in ("aaa-calm", "mmm-calm"):
        _send_predictions(client, auth, model, overconfident(model, 20, 1, {"region": "apac"}))
    drifting = overconfident("zzz-drifting", 300, seed=3, cohort={"region": "emea"})
    _send_predictions(client, auth, "zzz-drifting", drifting)
    _send_labels(client, auth, "zzz-drifting", drifting[:250])
    refresh_all(db, settings)
    _multiclass_contract(client, auth, model="nnn-late", min_labeled=50)  # never refreshed

    pages = _all_pages(client, auth, limit=2)
    assert [len(p) for p in pages] == [2, 2, 1]
    listed = [m for p in pages for m in p]
    assert listed[0]["model"] == "zzz-drifting"
    assert sorted(m["model"] for m in listed) == sorted((*names, "nnn-late"))
    assert listed[-1]["model"] == "nnn-late" and listed[-1]["status"] is None
    assert listed[-1]["windows"] == []

    doc = page(client, auth, "/ui")
    shown = {b.attrs["data-model"]: b.attrs["data-status"] for b in doc.find("tbody")}
    assert [b.attrs["data-model"] for b in doc.find("tbody")] == [m["model"] for m in listed]
    assert {m["model"]: m["status"] or "none" for m in listed} == shown
    assert shown["zzz-drifting"] == "alert"

    drift = listed[0]
    by_window = {w["window"]: w for w in drift["windows"]}
    assert [w["window"] for w in drift["windows"]] == [
        w for w in settings.windows if w in by_window
    ]
    assert by_window["24h"]["status"] == "alert"
    reading = ok(client.get("/v1/models/zzz-drifting/calibration", headers=auth.headers()))
    assert by_window["24h"]["labeled_predictions"] == reading["n_labeled"]
    assert by_window["24h"]["predictions"] == reading["n_predictions"]
    assert drift["contract_version"] == 1 and drift["waiting_labels"] == 0


def test_an_exactly_full_last_page_ends_the_listing(client: FlaskClient, auth: Auth) -> None:
    for model in ("one", "two"):
        _multiclass_contract(client, auth, model=model)
    body = ok(client.get("/v1/models?limit=2", headers=auth.headers("reader")))
    assert [m["model"] for m in body["models"]] == ["one", "two"]
    assert body["next_cursor"] is None
    assert ok(client.get("/v1/models", headers=auth.headers("reader")))["models"]


def test_an_empty_fleet_and_bad_paging_parameters(client: FlaskClient, auth: Auth) -> None:
    assert ok(client.get("/v1/models", headers=auth.headers("reader"))) == {
        "models": [],
        "next_cursor": None,
    }
    for query, field in (("limit=0", "limit"), ("cursor=nope", "cursor"), ("page=2", "page")):
        response = client.get(f"/v1/models?{query}", headers=auth.headers("reader"))
        error = assert_envelope(response, 422, "validation_failed")
        assert [d["field"] for d in error["details"]] == [field], query
    assert client.get("/v1/models", headers=auth.headers("ingest")).status_code == 403
