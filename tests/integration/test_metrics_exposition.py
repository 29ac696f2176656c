"""docs/metrics.md against a real ``GET /metrics`` exposition, and the counters exported at 0.

The exposition is served by the app after a stream, a refresh and a rejected batch: every
``calmon_`` family in it (less the ``_created`` stamps prometheus-client adds) is documented,
every documented metric is in it, with the documented label names wherever it has samples, and
its cohort labels are spelled as the page says (``all`` or ``key=value``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from service.db.database import Database
from service.export.instruments import INGEST_ROUTES, REJECTION_REASONS
from service.export.refresher import refresh_all
from tests.deploy.test_metrics_doc import DOC, documented, labels_in
from tests.integration.conftest import Auth
from tests.integration.test_stream import (
    _multiclass_contract,
    _random_predictions,
    _send_labels,
    _send_predictions,
)

ZERO = re.compile(r'^calmon_rejected_items_total\{endpoint="([^"]+)",reason="([^"]+)"\} 0\.0$')


def rejection_zeros(text: str) -> set[tuple[str, str]]:
    """The (endpoint, reason) series of ``calmon_rejected_items_total`` at 0 in an exposition."""
    return {m.groups() for line in text.splitlines() if (m := ZERO.match(line))}


def test_the_documented_metrics_are_those_a_real_exposition_serves(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    _multiclass_contract(client, auth)
    rows = _random_predictions(60, seed=5)
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:40])
    refused = client.post("/v1/predictions", json={"model": "glyphs"}, headers=auth.headers())
    assert refused.status_code == 422
    refresh_all(db, app.config["CALMON_SETTINGS"])
    text = client.get("/metrics").get_data(as_text=True)
    families = set(re.findall(r"^# TYPE (calmon_\w+) ", text, re.MULTILINE))
    served = {
        name: labels
        for name, labels in labels_in(text).items()
        if name in families and not name.endswith("_created")
    }
    docs = documented()
    assert sorted(set(served) - set(docs)) == [], "served but not in docs/metrics.md"
    assert sorted(set(docs) - set(served)) == [], "in docs/metrics.md but not served"
    wrong = {
        name: (docs[name][1], labels)
        for name, labels in served.items()
        if labels and labels != docs[name][1]
    }
    assert wrong == {}, "documented label names differ from the served ones"
    with_samples = {name for name, labels in served.items() if labels}
    assert {"calmon_ece", "calmon_labels_ingested_total", "calmon_rejected_items_total"} <= (
        with_samples
    )
    cohorts = set(re.findall(r'cohort="([^"]*)"', text))
    assert {"all", "lang=tr", "tier=gold"} <= cohorts
    assert all(c == "all" or re.fullmatch(r"[A-Za-z_][\w.-]*=.+", c) for c in cohorts)
    assert "`key=value`" in DOC.read_text() and "`key:value`" not in DOC.read_text()
    outcome = r'calmon_labels_ingested_total\{model="glyphs",outcome="(\w+)"'
    outcomes = set(re.findall(outcome, text))
    assert outcomes == {"joined", "pending", "duplicate", "conflict"}


def test_the_rejection_counter_is_served_at_zero_before_any_rejection(
    client: FlaskClient,
) -> None:
    text = client.get("/metrics").get_data(as_text=True)
    wanted = {(route, reason) for route in INGEST_ROUTES for reason in REJECTION_REASONS}
    assert wanted <= rejection_zeros(text) | _counted(text)


def _counted(text: str) -> set[tuple[str, str]]:
    """Series other tests of this process have already counted (the registry is shared)."""
    pattern = r'^calmon_rejected_items_total\{endpoint="([^"]+)",reason="([^"]+)"\} [1-9]'
    return {m.groups() for line in text.splitlines() if (m := re.match(pattern, line))}


def test_a_worker_in_multiprocess_mode_serves_the_zeros(tmp_path: Path) -> None:
    """What a gunicorn worker does: import the instruments with ``PROMETHEUS_MULTIPROC_DIR`` set;
    the scrape's multiprocess collector then reads the zeros from the worker's file."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run([sys.executable, "-c", "import service.export.instruments"], env=env, check=True)
    script = (
        "from prometheus_client import CollectorRegistry, generate_latest\n"
        "from prometheus_client.multiprocess import MultiProcessCollector\n"
        "registry = CollectorRegistry()\n"
        "MultiProcessCollector(registry)\n"
        "print(generate_latest(registry).decode())\n"
    )
    scraped = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    ).stdout
    wanted = {(route, reason) for route in INGEST_ROUTES for reason in REJECTION_REASONS}
    assert rejection_zeros(scraped) == wanted
