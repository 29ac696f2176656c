"""A model page shows an incident where it is: the history strip gives each step the status the
window reading gives at that step's end, the page opens on a window with data, and the status's
reasons lead in plain words. Each strip status is the window reading's (``monitoring``), decided
from one read of the buckets (``window_status``)."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from flask import Flask
from flask.testing import FlaskClient

from service.calibration.vocabulary import Status
from service.common.values import format_timestamp
from service.db.database import Database
from service.export.refresher import refresh_all
from service.stream import history as histories
from service.stream import monitoring
from service.stream.windows import Window, parse_duration
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body
from tests.integration.test_stream import minutes_ago

SVG = "{http://www.w3.org/2000/svg}"
#: Over-confident from this many hours ago (the incident's onset).
ONSET_HOURS = 8


def stream_an_incident(client: FlaskClient, auth: Auth) -> None:
    """20 hours of labeled predictions in two regions; emea over-confident for the last 8."""
    assert (
        client.post(
            "/v1/contracts/fit", json=fit_body("glyphs"), headers=auth.headers()
        ).status_code
        == 201
    )
    rng = np.random.default_rng(21)
    predictions: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    for i in range(4000):
        minutes = 5 + (i * 997) % (20 * 60)
        emea = i % 2 == 1
        sharp = 6.0 if emea and minutes < ONSET_HOURS * 60 else 1.0
        z = rng.normal(size=3) * 1.3
        p = np.exp(z) / np.exp(z).sum()
        predictions.append(
            {
                "id": f"b{i}",
                "ts": minutes_ago(minutes),
                "cohort": {"region": "emea" if emea else "apac"},
                "logits": (z * sharp).tolist(),
            }
        )
        labels.append({"id": f"b{i}", "label": int(rng.choice(3, p=p)), "ts": minutes_ago(0)})
    headers = auth.headers("ingest")
    body = {"model": "glyphs", "predictions": predictions}
    assert client.post("/v1/predictions", json=body, headers=headers).status_code == 200
    body = {"model": "glyphs", "labels": labels}
    assert client.post("/v1/labels", json=body, headers=headers).status_code == 200


def strip_of(page: str) -> list[tuple[str, str]]:
    """(status, tooltip) of each cell of the page's history strip."""
    svg = ET.fromstring(re.search(r"<svg[^>]*class=\"history\".*?</svg>", page, re.S).group(0))
    return [
        (r.get("class", "").removeprefix("status status-"), r.findtext(f"{SVG}title") or "")
        for r in svg.iter(f"{SVG}rect")
        if (r.get("class") or "").startswith("status ")
    ]


def test_the_strip_gives_each_step_the_window_status_at_its_end(
    client: FlaskClient, auth: Auth
) -> None:
    stream_an_incident(client, auth)
    now = datetime.now(UTC)
    reader = auth.headers("reader")
    page = client.get("/ui/models/glyphs?cohort=region%3Demea&window=24h&range=24h", headers=reader)
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    header = re.search(r'id="drift-status">([^<]+)<', text).group(1)
    assert header == "alert"
    cells = strip_of(text)
    statuses = [s for s, _ in cells]
    assert statuses[-1] == "alert", "the last step ends now, as the header's reading"
    assert "ok" in statuses, "before the incident the strip is judged, not grey"
    first = statuses.index("alert")
    ends = [datetime.fromisoformat(t.split(" window ending ")[1][:16] + "+00:00") for _, t in cells]
    onset = now - timedelta(hours=ONSET_HOURS)
    assert onset < ends[first] <= onset + timedelta(hours=4), (onset, ends[first])
    for k in (first - 1, first, len(cells) - 3):
        query = {
            "cohort": "region=emea",
            "start": format_timestamp(ends[k] - timedelta(hours=24)),
            "end": format_timestamp(ends[k]),
        }
        reading = client.get("/v1/models/glyphs/calibration", query_string=query, headers=reader)
        assert reading.get_json()["drift"]["status"] == statuses[k], k
    reasons = re.search(r'<ul id="reasons"><li><strong>([^<]+)</strong>', text).group(1)
    assert html.unescape(reasons) == "ECE above the contract's 0.1"


def test_the_fleet_says_what_a_status_means_before_its_statistics(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    stream_an_incident(client, auth)
    refresh_all(db, app.config["CALMON_SETTINGS"])
    text = client.get("/ui", headers=auth.headers("reader")).get_data(as_text=True)
    row = re.search(
        r'<tr class="slice-row" data-cohort="region=emea" data-window="24h" '
        r'data-status="alert">.*?<td colspan="3" class="reasons"><strong>([^<]+)</strong>: the ',
        text,
        re.S,
    )
    assert row is not None and html.unescape(row.group(1)) == "ECE above the contract's 0.1"
    assert 'href="/ui/models/glyphs?window=24h&amp;cohort=region%3Demea"' in text


def test_a_model_page_opens_on_the_shortest_window_with_a_status(
    client: FlaskClient, auth: Auth
) -> None:
    stream_an_incident(client, auth)
    text = client.get("/ui/models/glyphs", headers=auth.headers("reader")).get_data(as_text=True)
    assert re.search(r"<h2>Now: all, 1h ", text), "1h holds enough labels for a status"
    old = [
        {
            "id": "old-1",
            "ts": minutes_ago(60 * 24 * 9),
            "cohort": {"region": "mena"},
            "logits": [1, 0, 0],
        }
    ]
    body = {"model": "glyphs", "predictions": old}
    assert (
        client.post("/v1/predictions", json=body, headers=auth.headers("ingest")).status_code == 200
    )
    text = client.get(
        "/ui/models/glyphs?cohort=region%3Dmena", headers=auth.headers("reader")
    ).get_data(as_text=True)
    note = re.search(r'<p id="window-note" class="note">([^<]+)</p>', text).group(1)
    assert note.startswith("No prediction of region=mena in the last 7d: its data begins ")


def test_each_window_status_is_the_window_reading_status(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    stream_an_incident(client, auth)
    now = datetime.now(UTC)
    with db.session() as session:
        for cohort, step, window in (
            ("region=emea", timedelta(minutes=15), "24h"),
            ("region=emea", timedelta(hours=1), "1h"),
            ("all", timedelta(hours=1), "7d"),
        ):
            history = histories.model_history(
                session, "glyphs", cohort, now - timedelta(hours=22), now, step, now
            )
            found = histories.window_statuses(session, history, window, now)
            ends = [history.start + (i + 1) * step for i in range(len(history.points))]
            windows = [
                Window.trailing(window, now)
                if end > now
                else Window.between(end - parse_duration(window), end)
                for end in ends
            ]
            readings = monitoring.calibration_readings(
                session, "glyphs", [(cohort, w) for w in windows], now
            )
            assert list(found) == [r.drift.status for r in readings], (cohort, step, window)
            assert Status.ALERT in found or (cohort, window) != ("region=emea", "24h")
