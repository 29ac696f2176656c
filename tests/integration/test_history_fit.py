"""The history chart's default range spans a model's data: 12 hours of predictions fill the
chart instead of sitting at the right edge of 7 days (both backends)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from flask.testing import FlaskClient

from service.web.ui_models import span_text
from tests.integration.conftest import Auth
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_predictions,
    minutes_ago,
    ok,
)
from tests.integration.test_ui_pages import SVG_NS, page


def _spread(client: FlaskClient, auth: Auth, hours: float, n: int = 120) -> None:
    """``n`` predictions evenly over the ``hours`` before now (the oldest ``hours`` ago)."""
    rows = _random_predictions(n, seed=11)
    for i, r in enumerate(rows):
        r["ts"] = minutes_ago(hours * 60 * (n - i) / n)
        r["cohort"] = {}
    _send_predictions(client, auth, "glyphs", rows)


def _chart_query(client: FlaskClient, auth: Auth, url: str) -> dict[str, list[str]]:
    doc = page(client, auth, url)
    link = next(a for a in doc.iter("a") if "/history.svg?" in a.attrs.get("href", ""))
    return parse_qs(urlsplit(link.attrs["href"]).query)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_twelve_hours_of_data_fill_the_default_chart(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    _spread(client, auth, hours=12)

    query = _chart_query(client, auth, "/ui/models/glyphs")
    assert query["step"] == ["15m"]
    span = _at(query["end"][0]) - _at(query["start"][0])
    assert timedelta(hours=12) <= span <= timedelta(hours=12, minutes=30)
    doc = page(client, auth, "/ui/models/glyphs")
    assert "last 12h" in doc.find("h2", id="history")[0].all_text()

    history = ok(
        client.get(
            "/v1/models/glyphs/history?"
            + "&".join(f"{k}={v[0]}" for k, v in query.items() if k != "cohort"),
            headers=auth.headers(),
        )
    )
    points = history["points"]
    assert 48 <= len(points) <= 51
    with_data = [i for i, p in enumerate(points) if p["n_predictions"]]
    # The first and last steps hold data: the chart is filled from edge to edge.
    assert with_data[0] <= 1 and with_data[-1] >= len(points) - 2
    assert sum(p["n_predictions"] for p in points) == 120

    response = client.get("/v1/models/glyphs/history.svg", headers=auth.headers("reader"))
    assert response.status_code == 200
    svg = ET.fromstring(response.data)
    covers = svg.findall(f".//{SVG_NS}g[@class='cover']") + svg.findall(
        f".//{SVG_NS}g[@class='cover low']"
    )
    assert len(covers) >= 40, "one coverage bar per 15-minute step with predictions"


def test_a_chosen_range_and_longer_data_keep_hour_steps(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    _spread(client, auth, hours=72)

    fitted = _chart_query(client, auth, "/ui/models/glyphs")
    assert fitted["step"] == ["60m"]
    span = _at(fitted["end"][0]) - _at(fitted["start"][0])
    assert timedelta(hours=72) <= span <= timedelta(hours=73)
    chosen = _chart_query(client, auth, "/ui/models/glyphs?range=7d")
    assert chosen["step"] == ["60m"]
    span = _at(chosen["end"][0]) - _at(chosen["start"][0])
    assert timedelta(days=7) <= span <= timedelta(days=7, hours=1)


def test_a_model_without_data_gets_the_longest_range(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    query = _chart_query(client, auth, "/ui/models/glyphs")
    span = _at(query["end"][0]) - _at(query["start"][0])
    assert query["step"] == ["60m"] and span >= timedelta(days=7)


def test_span_text() -> None:
    assert span_text(timedelta(days=7)) == "7d"
    assert span_text(timedelta(hours=12)) == "12h"
    assert span_text(timedelta(hours=1, minutes=30)) == "1h 30min"
    assert span_text(timedelta(hours=50)) == "50h"
