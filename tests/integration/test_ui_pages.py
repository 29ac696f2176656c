"""The review pages' contents against the API: the fleet overview, one gate decision, class-wise
reliability and the history chart (both backends, through the Flask client)."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.calibration import softmax
from service.calibration.binning import assign_bins
from service.db.database import Database
from service.export.refresher import refresh_all
from tests.integration.conftest import Auth
from tests.integration.factories import QUARTER_EDGES, fit_body
from tests.integration.test_stream import (
    _multiclass_contract,
    _send_labels,
    _send_predictions,
    minutes_ago,
    ok,
    post,
)

SVG_NS = "{http://www.w3.org/2000/svg}"
_VOID = {"meta", "link", "input", "br", "img", "hr", "col", "source", "wbr", "area", "base"}


@dataclass
class Node:
    """An element of a parsed page: tag, attributes, children and its own text."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def iter(self, tag: str | None = None) -> list[Node]:
        found = [self] if tag is None or self.tag == tag else []
        for child in self.children:
            found += child.iter(tag)
        return found

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def find(self, tag: str, **attrs: str) -> list[Node]:
        return [n for n in self.iter(tag) if all(n.attrs.get(k) == v for k, v in attrs.items())]

    def has_class(self, name: str) -> bool:
        return name in self.attrs.get("class", "").split()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(Node("#text", {}, text=data))


def parse_page(text: str) -> Node:
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root


def page(client: FlaskClient, auth: Auth, url: str, status: int = 200) -> Node:
    response = client.get(url, headers=auth.headers("reader"))
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    return parse_page(response.get_data(as_text=True))


def overconfident(model: str, n: int, seed: int, cohort: dict[str, str]) -> list[dict[str, Any]]:
    """Rows whose logits are 4 times too sharp: the 24h status becomes ``alert``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3)) * 1.2
    truth = [int(rng.choice(3, p=np.exp(r) / np.exp(r).sum())) for r in z]
    return [
        {
            "id": f"{model}-{i}",
            "ts": minutes_ago(5),
            "cohort": cohort,
            "logits": (z[i] * 4).tolist(),
            "label": truth[i],
        }
        for i in range(n)
    ]


def events(client: FlaskClient, auth: Auth, query: str) -> list[dict[str, Any]]:
    return ok(client.get(f"/v1/audit/events?{query}", headers=auth.headers()))["events"]


def test_the_fleet_overview_shows_the_model_in_alert_first_with_its_cohort_and_since_when(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    settings = app.config["CALMON_SETTINGS"]
    for model in ("aaa-calm", "zzz-drifting"):
        _multiclass_contract(client, auth, model=model, min_labeled=50)
    calm = overconfident("aaa-calm", 20, seed=1, cohort={"region": "apac"})
    _send_predictions(client, auth, "aaa-calm", calm)
    drifting = overconfident("zzz-drifting", 300, seed=3, cohort={"region": "emea"})
    _send_predictions(client, auth, "zzz-drifting", drifting)
    _send_labels(client, auth, "zzz-drifting", drifting[:10])
    refresh_all(db, settings)
    _send_labels(client, auth, "zzz-drifting", drifting[10:250])
    refresh_all(db, settings)
    waiting = [{"id": f"later-{i}", "label": 0, "ts": minutes_ago(0)} for i in range(7)]
    ok(post(client, auth, "/v1/labels", {"model": "zzz-drifting", "labels": waiting}))
    contract = ok(client.get("/v1/models/zzz-drifting/contract", headers=auth.headers()))
    decision = ok(post(client, auth, "/v1/gate", {"contract_id": contract["id"]}, role="gate"))

    doc = page(client, auth, "/ui")
    bodies = doc.find("tbody")
    assert [b.attrs["data-model"] for b in bodies] == ["zzz-drifting", "aaa-calm"]
    assert bodies[0].attrs["data-status"] == "alert"
    slices = [r for r in bodies[0].iter("tr") if r.has_class("slice-row")]
    keys = [
        (r.attrs["data-cohort"], r.attrs["data-window"], r.attrs["data-status"]) for r in slices
    ]
    assert ("region=emea", "24h", "alert") in keys and ("all", "24h", "alert") in keys
    assert all(status in ("alert", "warn") for _, _, status in keys)
    severity = [{"alert": 2, "warn": 1}[s] for _, _, s in keys]
    assert severity == sorted(severity, reverse=True), "worst first"
    changes = {
        (e["details"]["cohort"], e["details"]["window"]): e
        for e in events(client, auth, "model=zzz-drifting&type=drift_status_changed")
        if e["details"]["to"] == "alert"
    }
    for row in slices:
        key = (row.attrs["data-cohort"], row.attrs["data-window"])
        since = row.find("time")
        if key in changes:
            assert since, key
            shown = datetime.fromisoformat(since[0].attrs["datetime"])
            assert shown == datetime.fromisoformat(changes[key]["ts"].replace("Z", "+00:00"))
    assert ("region=emea", "24h") in changes
    model_row = bodies[0].iter("tr")[0]
    cells = [c.all_text().strip() for c in model_row.iter("td")]
    reading = ok(client.get("/v1/models/zzz-drifting/calibration", headers=auth.headers()))
    assert cells[2:6] == [
        f"{reading['n_labeled']:,}",
        f"{reading['n_predictions']:,}",
        f"{reading['n_predictions'] - reading['n_labeled']:,}",
        "7",
    ]
    assert cells[6] == "v1"
    link = model_row.find("a", href=f"/ui/gate/{decision['id']}")
    assert link and link[0].all_text() == decision["decision"]
    calm_rows = [r for r in bodies[1].iter("tr") if r.has_class("slice-row")]
    assert calm_rows == [], "a model without alerts lists no slices"


def _significant(value: Any) -> Any:
    """Every float of ``value`` to 4 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, list):
        return [_significant(v) for v in value]
    if isinstance(value, dict):
        return {k: _significant(v) for k, v in value.items()}
    return value


def test_the_gate_decision_page_shows_checks_policy_evidence_and_its_audit_hashes(
    client: FlaskClient, auth: Auth
) -> None:
    contract = _multiclass_contract(client, auth)
    decision = ok(post(client, auth, "/v1/gate", {"contract_id": contract["id"]}, role="gate"))
    model = page(client, auth, "/ui/models/glyphs")
    assert model.find("a", href=f"/ui/gate/{decision['id']}"), "linked from the model page"

    doc = page(client, auth, f"/ui/gate/{decision['id']}")
    assert doc.find("span", id="decision")[0].all_text() == decision["decision"]
    rows = doc.find("table", id="checks")[0].iter("tr")[1:]
    assert [r.attrs["data-check"] for r in rows] == [c["name"] for c in decision["checks"]]
    ece = next(c for c in decision["checks"] if c["name"] == "eval_ece")
    assert ece["message"].startswith("debiased ECE ") and "95% interval [" in ece["message"]
    assert any(len(repr(v)) > 8 for v in ece["observed"].values() if isinstance(v, float))
    for row, check in zip(rows, decision["checks"], strict=True):
        cells = [c.all_text().strip() for c in row.iter("td")]
        assert cells[0] == ("passed" if check["passed"] else "failed")
        assert cells[3] == check["message"]
        for shown, value in ((cells[1], check["observed"]), (cells[2], check["threshold"])):
            if isinstance(value, float):
                assert shown == str(float(f"{value:.4g}"))
            elif isinstance(value, dict):
                assert json.loads(html.unescape(shown)) == _significant(value)
            elif isinstance(value, bool):
                assert shown == ("yes" if value else "no")
            elif isinstance(value, int):
                assert shown == f"{value:,}"
            elif isinstance(value, str):
                assert shown == value
    policy = {
        r.iter("th")[0].all_text(): r.iter("td")[0].all_text()
        for r in doc.find("table", id="policy")[0].iter("tr")[1:]
    }
    assert policy == {k: html.unescape(_json(v)) for k, v in decision["policy"].items()}
    bins = doc.find("table", id="evidence-bins")[0].iter("tr")[1:]
    reliability = decision["evidence"]["reliability"]
    assert [r.iter("td")[1].all_text() for r in bins] == [f"{b['n']:,}" for b in reliability]
    svg = [s for s in doc.iter("svg") if s.has_class("reliability")]
    assert [int(g.attrs["data-n"]) for g in svg[0].find("g", **{"class": "bin"})] == [
        b["n"] for b in reliability
    ]

    audit = events(client, auth, "type=gate_decided")
    event = next(e for e in audit if e["details"]["decision_id"] == decision["id"])
    text = {n.attrs["id"]: n.all_text() for n in doc.iter() if n.attrs.get("id")}
    assert text["policy-sha256"] == decision["policy_sha256"] == event["details"]["policy_sha256"]
    assert (
        text["evidence-sha256"]
        == decision["evidence_sha256"]
        == event["details"]["evidence_sha256"]
    )
    assert text["event-seq"] == str(event["seq"]) and text["event-sha256"] == event["sha256"]
    verdicts = [
        n.all_text()
        for n in doc.find("table", id="hashes")[0].iter("span")
        if n.has_class("pass") or n.has_class("fail")
    ]
    assert verdicts == ["matches", "matches", "matches"]
    page(client, auth, "/ui/gate/no-such-decision", status=404)


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _rows(n: int, seed: int, prefix: str) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    z = np.round(rng.normal(size=(n, 3)) * 2, 6)
    y = np.array([int(rng.choice(3, p=p)) for p in softmax(z)])
    rows = [
        {
            "id": f"{prefix}{i}",
            "ts": minutes_ago(10 + i % 300),
            "cohort": {"lang": "tr" if i % 2 else "hu"},
            "logits": z[i].tolist(),
            "label": int(y[i]),
        }
        for i in range(n)
    ]
    return z, y, rows


def test_class_wise_diagrams_hold_each_class_own_bins(client: FlaskClient, auth: Auth) -> None:
    contract = _multiclass_contract(client, auth)
    T = contract["calibrator"]["temperature"]
    z, y, rows = _rows(400, seed=5, prefix="k")
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:350])
    p = softmax(z[:350] / T)

    doc = page(client, auth, "/ui/models/glyphs?window=24h")
    figures = [f for f in doc.iter("figure") if f.has_class("class-diagram")]
    assert sorted(f.attrs["data-class"] for f in figures) == ["a", "b", "c"]
    for figure in figures:
        k = ["a", "b", "c"].index(figure.attrs["data-class"])
        bins = assign_bins(p[:, k], QUARTER_EDGES)
        expected = [int((bins == m).sum()) for m in range(4) if (bins == m).any()]
        svg = figure.iter("svg")[0]
        assert svg.attrs["role"] == "img" and svg.attrs["aria-label"]
        assert [int(g.attrs["data-n"]) for g in svg.find("g", **{"class": "bin"})] == expected
    table = doc.find("table", id="classwise")[0]
    support = {r.iter("th")[0].all_text(): r.iter("td")[0].all_text() for r in table.iter("tr")[1:]}
    assert support == {name: f"{int((y[:350] == k).sum()):,}" for k, name in enumerate("abc")}

    cohort = page(client, auth, "/ui/models/glyphs?window=24h&cohort=lang:tr")
    tr = [i for i in range(350) if i % 2]
    figure = next(f for f in cohort.iter("figure") if f.attrs.get("data-class") == "a")
    counts = assign_bins(p[tr, 0], QUARTER_EDGES)
    expected = [int((counts == m).sum()) for m in range(4) if (counts == m).any()]
    assert [int(g.attrs["data-n"]) for g in figure.find("g", **{"class": "bin"})] == expected

    contract_page = page(client, auth, f"/ui/contracts/{contract['id']}")
    note = contract_page.find("p", id="baseline-classwise")[0].all_text()
    assert "no class-wise table" in note
    assert len([f for f in contract_page.iter("figure") if f.has_class("class-diagram")]) == 3


def test_binary_contracts_have_no_class_wise_section(client: FlaskClient, auth: Auth) -> None:
    from tests.integration.test_stream import register_binary, seed_rows

    register_binary(
        client,
        auth,
        "fraud",
        {"method": "identity"},
        seed_rows("validation"),
        seed_rows("test"),
    )
    doc = page(client, auth, "/ui/models/fraud")
    assert not doc.find("table", id="classwise") and not doc.find("h2", id="classwise-heading")


def history_json(client: FlaskClient, auth: Auth, query: str) -> dict[str, Any]:
    return ok(client.get(f"/v1/models/glyphs/history?{query}", headers=auth.headers()))


MIN_LABELED = 5


def test_the_history_svg_has_a_point_and_band_per_step_with_labels(
    client: FlaskClient, auth: Auth
) -> None:
    """Each labeled step has a band and a point, hollow when it has fewer than min_labeled."""
    _multiclass_contract(client, auth, min_labeled=MIN_LABELED)
    _, _, rows = _rows(600, seed=6, prefix="h")
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", [r for i, r in enumerate(rows) if i % 300 >= 120])

    doc = page(client, auth, "/ui/models/glyphs?range=24h&cohort=lang:tr")
    link = next(a for a in doc.iter("a") if "/history.svg?" in a.attrs.get("href", ""))
    query = urlsplit(link.attrs["href"]).query
    assert parse_qs(query)["step"] == ["60m"] and parse_qs(query)["cohort"] == ["lang=tr"]
    found = history_json(client, auth, query)
    labeled = [p for p in found["points"] if p["n_labeled"]]
    unlabeled = [p for p in found["points"] if p["n_predictions"] and not p["n_labeled"]]
    assert len(labeled) >= 3 and unlabeled, "the fixture has gaps to draw"

    inline = next(s for s in doc.iter("svg") if s.has_class("history"))
    assert len(inline.find("rect", **{"class": "band"})) == len(labeled)
    response = client.get(f"/v1/models/glyphs/history.svg?{query}", headers=auth.headers("reader"))
    assert response.status_code == 200 and response.mimetype == "image/svg+xml"
    assert (
        response.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    )
    svg = ET.fromstring(response.data)
    assert svg.get("role") == "img" and "steps have labels" in svg.get("aria-label", "")
    assert svg.find(f"{SVG_NS}title") is not None and svg.find(f"{SVG_NS}desc") is not None
    bands = svg.findall(f".//{SVG_NS}rect[@class='band']")
    points = svg.findall(f".//{SVG_NS}g[@class='step']")
    assert len(bands) == len(points) == len(labeled)
    assert [g.get("data-start") for g in points] == [
        datetime.fromisoformat(p["start"].replace("Z", "+00:00")).isoformat() for p in labeled
    ]
    for g, p in zip(points, labeled, strict=True):
        title = g.findtext(f"{SVG_NS}title") or ""
        assert f"ECE debiased {p['ece_debiased']:.4f}" in title
        assert f"{p['n_labeled']:,} labeled of {p['n_predictions']:,}" in title
        drawn = "point hollow" if p["n_labeled"] < MIN_LABELED else "point"
        assert g.find(f"{SVG_NS}circle[@class='{drawn}']") is not None, p
    lines = svg.findall(f".//{SVG_NS}polyline[@class='ece-line']")
    index = {p["start"]: i for i, p in enumerate(found["points"])}
    runs = _runs([index[p["start"]] for p in labeled])
    assert sorted(len(line.get("points", "").split()) for line in lines) == sorted(
        len(r) for r in runs if len(r) > 1
    ), "lines join consecutive labeled steps only"
    covers = svg.findall(f".//{SVG_NS}g[@class='cover low']")
    low = [p for p in found["points"] if p["n_predictions"] and p["label_coverage"] < 0.5]
    assert len(covers) == len(low)


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("range=1y", "range"),
        ("colour=red", "colour"),
        ("window=24h&start=2026-01-01T00:00:00Z", "window"),
    ],
)
def test_a_bad_model_page_query_is_a_page_naming_it(
    client: FlaskClient, auth: Auth, query: str, field: str
) -> None:
    _multiclass_contract(client, auth)
    doc = page(client, auth, f"/ui/models/glyphs?{query}", status=422)
    assert doc.iter("h1")[0].all_text() == "invalid request"
    details = [li.all_text() for li in doc.find("ul", id="error-details")[0].iter("li")]
    assert [d.split(":")[0] for d in details] == [field]


def test_history_svg_refuses_what_the_history_refuses(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    for query, name in (("step=7m", "step"), ("format=csv", "format"), ("cohort=", "cohort")):
        response = client.get(f"/v1/models/glyphs/history.svg?{query}", headers=auth.headers())
        assert response.status_code == 422, query
        assert [d["field"] for d in response.get_json()["error"]["details"]] == [name]
    assert client.get("/v1/models/nobody/history.svg", headers=auth.headers()).status_code == 404
    fitted = fit_body("other")
    assert client.post("/v1/contracts/fit", json=fitted, headers=auth.headers()).status_code == 201


def test_the_root_redirects_to_the_fleet_page(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code in (302, 308)
    assert urlsplit(response.headers["Location"]).path == "/ui"
