"""A label means a class of the contract its prediction is bound to, not of the current one."""

from __future__ import annotations

from typing import Any

import numpy as np
from flask.testing import FlaskClient
from sqlalchemy import text

from service.db.database import Database
from service.stream.ingestion import sweep_waiting_labels
from tests.integration.conftest import Auth
from tests.integration.factories import (
    REFERENCE_EVAL_LABELS,
    REFERENCE_EVAL_LOGITS,
    REFERENCE_FIT_LABELS,
    REFERENCE_FIT_LOGITS,
    contract_fields,
    fit_body,
)
from tests.integration.test_stream import minutes_ago, ok, post, reading

POLICY = {"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 1}


def _version(client: FlaskClient, auth: Auth, classes: list[str]) -> dict[str, Any]:
    """Fit and register a multiclass version of ``glyphs`` with ``classes`` (K = 3 or 4)."""
    extra = len(classes) - 3

    def widen(logits: list[list[float]]) -> list[list[float]]:
        return [row + [-1.0] * extra for row in logits]

    body = fit_body(
        "glyphs",
        classes=classes,
        policy=POLICY,
        fit={"logits": widen(REFERENCE_FIT_LOGITS), "labels": REFERENCE_FIT_LABELS},
        eval={"logits": widen(REFERENCE_EVAL_LOGITS), "labels": REFERENCE_EVAL_LABELS},
    )
    return ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))


def _binary_version(client: FlaskClient, auth: Auth, classes: list[str]) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    scores = rng.uniform(0.05, 0.95, size=200)
    labels = (rng.uniform(size=200) < scores).astype(int).tolist()
    body = contract_fields("alarms", task="binary", classes=classes, policy=POLICY)
    body.update(
        method="platt",
        fit={"scores": scores[:100].tolist(), "labels": labels[:100]},
        eval={"scores": scores[100:].tolist(), "labels": labels[100:]},
    )
    return ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))


def _predict(
    client: FlaskClient, auth: Auth, ids: list[str], contract_id: str | None = None, **value: Any
) -> dict[str, Any]:
    """Predictions of ``ids``, each with the same ``logits=`` or ``score=``."""
    model = "glyphs" if "logits" in value else "alarms"
    body: dict[str, Any] = {
        "model": model,
        "predictions": [{"id": i, "ts": minutes_ago(5), **value} for i in ids],
    }
    if contract_id is not None:
        body["contract_id"] = contract_id
    return ok(post(client, auth, "/v1/predictions", body))


def _labels(client: FlaskClient, auth: Auth, model: str, labels: dict[str, Any]) -> Any:
    items = [{"id": i, "label": label, "ts": minutes_ago(1)} for i, label in labels.items()]
    return post(client, auth, "/v1/labels", {"model": model, "labels": items})


def test_a_reordered_version_leaves_the_labels_of_older_predictions_their_meaning(
    client: FlaskClient, auth: Auth
) -> None:
    v1 = _version(client, auth, ["a", "b", "c"])
    _predict(client, auth, ["p0", "p1"], logits=[6.0, 0.0, 0.0])
    _version(client, auth, ["c", "b", "a"])
    # Labels sent before their prediction wait as sent and are read by its contract, v1.
    early = ok(_labels(client, auth, "glyphs", {"w0": "a", "w1": "a"}))
    assert early["pending"] == 2
    joined = _predict(client, auth, ["w0", "w1"], contract_id=v1["id"], logits=[6.0, 0.0, 0.0])
    assert (joined["joined_pending_labels"], joined["discarded_pending_labels"]) == (2, 0)
    assert ok(_labels(client, auth, "glyphs", {"p0": "a", "p1": 0}))["joined"] == 2
    got = reading(client, auth, "glyphs")
    assert got["contract"]["id"] == v1["id"]
    assert got["n_labeled"] == 4
    assert got["metrics"]["accuracy"] == 1.0
    assert got["metrics"]["label_counts"] == [4, 0, 0]
    # Met again, the name and the index of the same class under v1 agree.
    again = ok(_labels(client, auth, "glyphs", {"p0": 0, "p1": "a"}))
    assert (again["duplicates"], again["conflicts"]) == (2, [])
    other = ok(_labels(client, auth, "glyphs", {"p0": "c"}))
    assert other["conflicts"] == [
        {"id": "p0", "label": "c", "stored_label": "a", "reason": other["conflicts"][0]["reason"]}
    ]


def test_a_class_the_prediction_s_contract_lacks_is_refused_naming_the_item(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    v1 = _version(client, auth, ["a", "b", "c"])
    _predict(client, auth, ["p0", "p1", "p2"], logits=[0.0, 0.0, 6.0])
    _version(client, auth, ["a", "b", "c", "d"])
    refused = _labels(client, auth, "glyphs", {"p0": "c", "p1": "d", "p2": 3, "later": "d"})
    assert refused.status_code == 422, refused.get_json()
    details = refused.get_json()["error"]["details"]
    assert [(d["field"], d["item"]) for d in details] == [
        ("labels[1].label", 1),
        ("labels[2].label", 2),
    ]
    assert v1["id"] in details[0]["message"] and "'d'" in details[0]["message"]
    assert "class index 3" in details[1]["message"]
    got = reading(client, auth, "glyphs")
    assert got["n_labeled"] == 0
    with db.session() as session:
        assert session.scalar(text("SELECT count(*) FROM labels")) == 0
    # The valid part alone is accepted; a name only the new version knows may wait.
    accepted = ok(_labels(client, auth, "glyphs", {"p0": "c", "later": "d"}))
    assert (accepted["joined"], accepted["pending"]) == (1, 1)
    assert reading(client, auth, "glyphs")["metrics"]["accuracy"] == 1.0


def test_a_waiting_label_its_prediction_s_contract_lacks_is_discarded_and_counted(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    v1 = _version(client, auth, ["a", "b", "c"])
    _version(client, auth, ["a", "b", "c", "d"])
    early = ok(_labels(client, auth, "glyphs", {"w0": "d", "w1": 3, "w2": "c", "w3": 1}))
    assert early["pending"] == 4
    joined = _predict(
        client, auth, ["w0", "w1", "w2", "w3"], contract_id=v1["id"], logits=[0.0, 0.0, 6.0]
    )
    assert (joined["joined_pending_labels"], joined["discarded_pending_labels"]) == (2, 2)
    got = reading(client, auth, "glyphs")
    assert (got["n_predictions"], got["n_labeled"]) == (4, 2)
    assert got["metrics"]["label_counts"] == [0, 1, 1]
    with db.session() as session:
        rows = session.execute(text("SELECT id, label, joined FROM labels ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("w2", 2, True), ("w3", 1, True)]


def test_the_sweep_reads_a_waiting_label_by_its_prediction_s_contract(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    """A label left waiting beside its prediction (written at the same moment) is judged like
    one met by its prediction: read by that contract, or deleted if it has no such class."""
    _version(client, auth, ["a", "b", "c"])
    _predict(client, auth, ["p0", "p1"], logits=[6.0, 0.0, 0.0])
    _version(client, auth, ["c", "b", "a", "d"])
    with db.session() as session:
        session.execute(
            text(
                "INSERT INTO labels (model, id, label, label_name, ts, received_at, joined)"
                " VALUES ('glyphs', 'p0', 2, 'a', :now, :now, false),"
                " ('glyphs', 'p1', 3, 'd', :now, :now, false)"
            ),
            {"now": minutes_ago(1).replace("Z", "+00:00")},
        )
        session.commit()
        assert sweep_waiting_labels(session, "glyphs") == 1
        rows = session.execute(text("SELECT id, label, joined FROM labels ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("p0", 0, True)]
    got = reading(client, auth, "glyphs")
    assert (got["n_labeled"], got["metrics"]["accuracy"]) == (1, 1.0)


def test_binary_labels_keep_their_meaning_across_a_swapped_version(
    client: FlaskClient, auth: Auth
) -> None:
    v1 = _binary_version(client, auth, ["normal", "suspect"])
    _predict(client, auth, ["s0", "s1"], score=0.95)
    _binary_version(client, auth, ["suspect", "normal"])
    assert ok(_labels(client, auth, "alarms", {"s0": "suspect", "s1": 1}))["joined"] == 2
    got = reading(client, auth, "alarms")
    assert got["contract"]["id"] == v1["id"]
    assert got["metrics"]["label_counts"] == [0, 2]
    refused = _labels(client, auth, "alarms", {"s0": "maybe"})
    assert refused.status_code == 422
