"""The production stream: predictions, delayed labels, rolling readings per cohort, drift."""

from __future__ import annotations

import csv
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from service import create_app
from service.calibration import (
    IdentityCalibrator,
    PlattCalibrator,
    binary_reading,
    multiclass_reading,
)
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import contract_fields, fit_body

FIVE_BINS = [0, 0.2, 0.4, 0.6, 0.8, 1]
DATA = Path(__file__).resolve().parents[1] / "data" / "turkish_seed.csv"


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def minutes_ago(m: float) -> str:
    return iso(datetime.now(UTC) - timedelta(minutes=m))


def seed_rows(split: str) -> list[dict[str, Any]]:
    with DATA.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["split"] == split]
    out = []
    for r in rows:
        s = float(r["score"])
        sharp = s**3 / (s**3 + (1 - s) ** 3)
        out.append(
            {
                "id": f"{split}-{r['id']}",
                "region": r["region"],
                "score": sharp,
                "label": int(r["label"]),
            }
        )
    return out


def post(client: FlaskClient, auth: Auth, url: str, body: dict, role: str = "ingest") -> Any:
    return client.post(url, json=body, headers=auth.headers(role))


def ok(response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.get_json()
    return response.get_json()


def reading(client: FlaskClient, auth: Auth, model: str, query: str = "window=24h") -> dict:
    return ok(client.get(f"/v1/models/{model}/calibration?{query}", headers=auth.headers()))


def register_binary(
    client: FlaskClient,
    auth: Auth,
    model: str,
    calibrator: dict,
    fit_rows: list[dict],
    eval_rows: list[dict],
    min_labeled: int = 20,
) -> dict:
    """Register a binary 5-bin contract whose baseline is computed here from the seed rows."""
    cal = (
        IdentityCalibrator()
        if calibrator["method"] == "identity"
        else PlattCalibrator(calibrator["slope"], calibrator["intercept"])
    )

    def measure(rows: list[dict], which) -> dict:
        s = np.array([r["score"] for r in rows])
        y = np.array([r["label"] for r in rows])
        return binary_reading(s, y, np.array(FIVE_BINS, float), calibrator=which).to_dict()

    body = contract_fields(
        model,
        task="binary",
        classes=["normal", "suspect"],
        bin_edges=FIVE_BINS,
        policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": min_labeled},
    )
    body.update(
        calibrator=calibrator,
        baseline={
            split: {
                "uncalibrated": measure(rows, IdentityCalibrator()),
                "calibrated": measure(rows, cal),
            }
            for split, rows in (("fit", fit_rows), ("eval", eval_rows))
        },
    )
    return ok(post(client, auth, "/v1/contracts", body, role="admin"))


def stream(
    client: FlaskClient, auth: Auth, model: str, rows: list[dict], *, batch: int = 100
) -> None:
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        ok(
            post(
                client,
                auth,
                "/v1/predictions",
                {
                    "model": model,
                    "predictions": [
                        {
                            "id": r["id"],
                            "ts": minutes_ago(5 + (start + i) % 300),
                            "cohort": {"region": r["region"]},
                            "score": r["score"],
                        }
                        for i, r in enumerate(chunk)
                    ],
                },
            )
        )
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        ok(
            post(
                client,
                auth,
                "/v1/labels",
                {
                    "model": model,
                    "labels": [
                        {"id": r["id"], "label": r["label"], "ts": minutes_ago(1)} for r in chunk
                    ],
                },
            )
        )


def test_turkish_seed_streamed_with_an_identity_contract(client: FlaskClient, auth: Auth) -> None:
    validation, test = seed_rows("validation"), seed_rows("test")
    register_binary(client, auth, "subscribers", {"method": "identity"}, validation, test)
    stream(client, auth, "subscribers", test)
    got = reading(client, auth, "subscribers")
    assert got["n_predictions"] == got["n_labeled"] == 252
    assert round(got["metrics"]["ece"], 4) == 0.1512
    assert [b["n"] for b in got["bins"]] == [204, 10, 7, 8, 23]
    assert round(got["metrics"]["auc"], 2) == round(0.8058, 2)
    assert got["label_coverage"] == 1.0


def test_turkish_seed_streamed_with_a_platt_contract(client: FlaskClient, auth: Auth) -> None:
    validation, test = seed_rows("validation"), seed_rows("test")
    body = contract_fields(
        "subscribers", task="binary", classes=["normal", "suspect"], bin_edges=FIVE_BINS
    )
    body.update(
        method="platt",
        fit={
            "scores": [r["score"] for r in validation],
            "labels": [r["label"] for r in validation],
        },
        eval={"scores": [r["score"] for r in test], "labels": [r["label"] for r in test]},
    )
    contract = ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))
    assert round(contract["calibrator"]["slope"], 4) == 0.3013
    assert round(contract["calibrator"]["intercept"], 4) == -0.3695
    stream(client, auth, "subscribers", test)
    got = reading(client, auth, "subscribers")
    assert round(got["metrics"]["ece"], 4) == 0.0463
    assert got["metrics"]["ece"] == pytest.approx(
        contract["baseline"]["eval"]["calibrated"]["ece"], abs=1e-12
    )


def test_per_cohort_readings_equal_a_direct_computation(client: FlaskClient, auth: Auth) -> None:
    validation, test = seed_rows("validation"), seed_rows("test")
    register_binary(
        client,
        auth,
        "subscribers",
        {"method": "platt", "slope": 0.3013, "intercept": -0.3695},
        validation,
        test,
    )
    stream(client, auth, "subscribers", test, batch=64)
    calibrator = PlattCalibrator(0.3013, -0.3695)
    regions = sorted({r["region"] for r in test})
    cohorts = ok(client.get("/v1/models/subscribers/cohorts", headers=auth.headers()))
    assert {c["cohort"] for c in cohorts["slices"]} == {"all"} | {f"region={g}" for g in regions}
    for region in regions:
        rows = [r for r in test if r["region"] == region]
        direct = binary_reading(
            np.array([r["score"] for r in rows]),
            np.array([r["label"] for r in rows]),
            np.array(FIVE_BINS, float),
            calibrator=calibrator,
        )
        got = reading(client, auth, "subscribers", f"window=24h&cohort=region:{region}")
        assert got["cohort"] == f"region={region}"
        assert got["n_labeled"] == direct.n == len(rows)
        for key in ("ece", "nll", "brier", "accuracy", "mean_confidence", "prevalence"):
            assert got["metrics"][key] == pytest.approx(getattr(direct, key), abs=1e-12), key
        assert [b["n"] for b in got["bins"]] == [b.n for b in direct.bins]
        assert got["metrics"]["ece_ci"] == pytest.approx(list(direct.ece_ci), abs=1e-12)


def _multiclass_contract(
    client: FlaskClient, auth: Auth, model: str = "glyphs", min_labeled: int = 5
) -> dict:
    body = fit_body(
        model, policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": min_labeled}
    )
    return ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))


def _random_predictions(n: int, seed: int, prefix: str = "p") -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, 3)) * 2
    truth = np.array([rng.choice(3, p=np.exp(z) / np.exp(z).sum()) for z in logits])
    langs = ["tr", "hu", "id"]
    return [
        {
            "id": f"{prefix}{i}",
            "ts": minutes_ago(10 + i % 600),
            "cohort": {"lang": langs[i % 3], "tier": "gold" if i % 5 == 0 else "std"},
            "logits": logits[i].tolist(),
            "label": int(truth[i]),
        }
        for i in range(n)
    ]


def _send_predictions(client, auth, model, rows) -> dict:
    return ok(
        post(
            client,
            auth,
            "/v1/predictions",
            {
                "model": model,
                "predictions": [{k: r[k] for k in ("id", "ts", "cohort", "logits")} for r in rows],
            },
        )
    )


def _send_labels(client, auth, model, rows) -> dict:
    return ok(
        post(
            client,
            auth,
            "/v1/labels",
            {
                "model": model,
                "labels": [
                    {"id": r["id"], "label": r["label"], "ts": minutes_ago(0)} for r in rows
                ],
            },
        )
    )


def _comparable(got: dict) -> dict:
    return {k: got[k] for k in ("n_predictions", "n_labeled", "metrics", "bins")} | {
        "psi": got["drift"]["confidence_psi"],
        "refit": got["drift"]["refit_temperature"],
    }


def test_label_order_and_interleaving_do_not_change_the_reading(
    app: Flask, client: FlaskClient, auth: Auth
) -> None:
    rows = _random_predictions(300, seed=1)
    _multiclass_contract(client, auth, "serial")
    _multiclass_contract(client, auth, "shuffled")
    _send_predictions(client, auth, "serial", rows)
    _send_labels(client, auth, "serial", rows)

    rng = random.Random(4)
    early = rows[:120]
    rng.shuffle(early)
    pending = _send_labels(client, auth, "shuffled", early)
    assert pending["pending"] == 120 and pending["joined"] == 0
    order = rows[:]
    rng.shuffle(order)
    for start in range(0, 300, 70):
        part = order[start : start + 70]
        accepted = _send_predictions(client, auth, "shuffled", part)
        assert accepted["accepted"] == len(part)
        late = [r for r in part if r not in early]
        if late:
            assert _send_labels(client, auth, "shuffled", late)["joined"] == len(late)
    serial = reading(client, auth, "serial")
    shuffled = reading(client, auth, "shuffled")
    assert _comparable(serial)["n_labeled"] == 300
    _approx_tree(_comparable(shuffled), _comparable(serial))
    for cohort in ("lang:tr", "tier:gold"):
        a = reading(client, auth, "serial", f"cohort={cohort}")
        b = reading(client, auth, "shuffled", f"cohort={cohort}")
        _approx_tree(_comparable(a), _comparable(b))


def _approx_tree(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _approx_tree(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _approx_tree(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        # The refit temperature is a bounded Brent fit (|log T| error < 1e-6): row order moves it
        # within that tolerance; everything else is a sum and agrees to rounding.
        rel = 1e-6 if path == ".refit" else 1e-9
        assert b == pytest.approx(a, rel=rel, abs=1e-12), path
    else:
        assert a == b, path


def test_reading_equals_a_direct_computation_on_the_stored_rows(
    client: FlaskClient, auth: Auth
) -> None:
    contract = _multiclass_contract(client, auth)
    rows = _random_predictions(200, seed=2)
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:150])
    got = reading(client, auth, "glyphs")
    logits = np.array([r["logits"] for r in rows[:150]])
    labels = np.array([r["label"] for r in rows[:150]])
    from service.calibration import TemperatureCalibrator

    T = contract["calibrator"]["temperature"]
    direct = multiclass_reading(
        logits, labels, np.array(contract["bin_edges"], float), calibrator=TemperatureCalibrator(T)
    )
    assert got["n_predictions"] == 200 and got["n_labeled"] == 150
    assert got["label_coverage"] == pytest.approx(0.75)
    for key in ("ece", "mce", "nll", "brier", "accuracy", "classwise_ece"):
        assert got["metrics"][key] == pytest.approx(getattr(direct, key), abs=1e-12), key
    unlabeled = np.array([r["logits"] for r in rows[150:]]) / T
    p = np.exp(unlabeled - unlabeled.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert got["drift"]["expected_accuracy"] == pytest.approx(p.max(1).mean(), abs=1e-12)
    assert got["baseline"] == contract["baseline"]["eval"]["calibrated"]


def test_an_over_confident_stream_alerts_only_with_enough_labels(
    client: FlaskClient, auth: Auth
) -> None:
    _multiclass_contract(client, auth, min_labeled=200)
    rng = np.random.default_rng(5)
    n = 600
    true_logits = rng.normal(size=(n, 3)) * 1.2
    truth = [int(rng.choice(3, p=np.exp(z) / np.exp(z).sum())) for z in true_logits]
    rows = [
        {
            "id": f"o{i}",
            "ts": minutes_ago(30 + i % 100),
            "cohort": {},
            "logits": (true_logits[i] * 4).tolist(),
            "label": truth[i],
        }
        for i in range(n)
    ]
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows[:100])
    early = reading(client, auth, "glyphs")["drift"]
    assert early["status"] == "insufficient_data"
    assert early["refit_temperature"] > 2
    _send_labels(client, auth, "glyphs", rows[100:])
    got = reading(client, auth, "glyphs")
    late = got["drift"]
    assert late["status"] == "alert", late
    assert late["refit_temperature"] > 2.5
    assert got["metrics"]["ece_ci"][0] > 0.1
    assert late["ece_delta"] == pytest.approx(got["metrics"]["ece"] - got["baseline"]["ece"])
    assert any("max_ece" in reason for reason in late["reasons"])


def test_idempotent_retries_and_conflicts(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    rows = _random_predictions(10, seed=3)
    first = _send_predictions(client, auth, "glyphs", rows)
    assert (first["accepted"], first["duplicates"]) == (10, 0)
    again = _send_predictions(client, auth, "glyphs", rows + rows[:2])
    assert (again["accepted"], again["duplicates"]) == (0, 12)
    changed = [dict(rows[3], logits=[9, 9, 9]), {**rows[0], "id": "brand-new"}]
    response = post(
        client,
        auth,
        "/v1/predictions",
        {
            "model": "glyphs",
            "predictions": [{k: r[k] for k in ("id", "ts", "cohort", "logits")} for r in changed],
        },
    )
    assert response.status_code == 409
    assert response.get_json()["error"]["details"][0]["item"] == 0
    assert reading(client, auth, "glyphs")["n_predictions"] == 10

    _send_labels(client, auth, "glyphs", rows[:4])
    labels = [
        {"id": rows[0]["id"], "label": rows[0]["label"], "ts": minutes_ago(0)},
        {"id": rows[1]["id"], "label": (rows[1]["label"] + 1) % 3, "ts": minutes_ago(0)},
        {"id": rows[5]["id"], "label": "b", "ts": minutes_ago(0)},
        {"id": rows[5]["id"], "label": "c", "ts": minutes_ago(0)},
        {"id": "not-yet", "label": 0, "ts": minutes_ago(0)},
    ]
    result = ok(post(client, auth, "/v1/labels", {"model": "glyphs", "labels": labels}))
    assert (result["joined"], result["pending"], result["duplicates"]) == (1, 1, 1)
    assert {c["id"] for c in result["conflicts"]} == {rows[1]["id"], rows[5]["id"]}
    again = ok(post(client, auth, "/v1/labels", {"model": "glyphs", "labels": labels[4:]}))
    assert (again["pending"], again["duplicates"]) == (0, 1)
    got = reading(client, auth, "glyphs")
    assert got["n_labeled"] == 5


def test_invalid_items_are_listed_and_nothing_is_written(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    good = {"id": "ok", "ts": minutes_ago(1), "cohort": {"lang": "tr"}, "logits": [1, 2, 3]}
    bad = [
        {**good, "id": "k", "logits": [1, 2]},
        {**good, "id": "ts", "ts": "2026-11-30T10:00:00"},
        {**good, "id": "keys", "cohort": {f"k{i}": "v" for i in range(9)}},
        {**good, "id": "long", "cohort": {"lang": "x" * 65}},
        {**good, "id": "num", "logits": [1, "2", 3]},
        {**good, "id": "extra", "colour": "red"},
        {**good, "id": ""},
        "not an object",
    ]
    response = post(
        client, auth, "/v1/predictions", {"model": "glyphs", "predictions": [good, *bad]}
    )
    assert response.status_code == 422
    details = response.get_json()["error"]["details"]
    assert sorted({d["item"] for d in details}) == list(range(1, 9))
    fields = {d["field"] for d in details}
    assert {
        "predictions[1].logits",
        "predictions[2].ts",
        "predictions[3].cohort",
        "predictions[4].cohort.lang",
        "predictions[5].logits",
        "predictions[6].colour",
        "predictions[7].id",
        "predictions[8]",
    } <= fields
    assert reading(client, auth, "glyphs")["n_predictions"] == 0
    raw = client.application.json.dumps({"model": "glyphs", "predictions": [good]})
    raw = raw.replace("[1, 2, 3]", "[1, 1e999, 3]")
    inf = client.post(
        "/v1/predictions",
        data=raw,
        headers={**auth.headers("ingest"), "Content-Type": "application/json"},
    )
    assert inf.status_code == 422
    assert inf.get_json()["error"]["details"][0]["message"] == "must be finite"
    labels = post(
        client,
        auth,
        "/v1/labels",
        {
            "model": "glyphs",
            "labels": [
                {"id": "x", "label": 3, "ts": minutes_ago(0)},
                {"id": "y", "label": "zebra", "ts": minutes_ago(0)},
                {"id": "z", "label": 1.5, "ts": "yesterday"},
            ],
        },
    )
    assert labels.status_code == 422
    assert {d["field"] for d in labels.get_json()["error"]["details"]} == {
        "labels[0].label",
        "labels[1].label",
        "labels[2].label",
        "labels[2].ts",
    }


def test_binary_scores_out_of_range_are_422(client: FlaskClient, auth: Auth) -> None:
    validation, test = seed_rows("validation"), seed_rows("test")
    register_binary(client, auth, "subscribers", {"method": "identity"}, validation, test)
    response = post(
        client,
        auth,
        "/v1/predictions",
        {
            "model": "subscribers",
            "predictions": [
                {"id": "a", "ts": minutes_ago(1), "score": 1.5},
                {"id": "b", "ts": minutes_ago(1), "logits": [0.1, 0.9]},
            ],
        },
    )
    fields = {d["field"] for d in response.get_json()["error"]["details"]}
    assert fields == {"predictions[0].score", "predictions[1].logits", "predictions[1].score"}


def test_binding_rules(client: FlaskClient, auth: Auth) -> None:
    one = {"id": "p", "ts": minutes_ago(1), "logits": [1, 2, 3]}
    unknown = post(client, auth, "/v1/predictions", {"model": "nobody", "predictions": [one]})
    assert unknown.status_code == 404
    v1 = _multiclass_contract(client, auth)
    other = _multiclass_contract(client, auth, model="other")
    wrong = post(
        client,
        auth,
        "/v1/predictions",
        {"model": "glyphs", "contract_id": other["id"], "predictions": [one]},
    )
    assert (
        wrong.status_code == 422
        and wrong.get_json()["error"]["details"][0]["field"] == "contract_id"
    )
    missing = post(
        client,
        auth,
        "/v1/predictions",
        {"model": "glyphs", "contract_id": "nope", "predictions": [one]},
    )
    assert missing.status_code == 404
    client.post(f"/v1/contracts/{v1['id']}/retire", json={"reason": "x"}, headers=auth.headers())
    none = post(client, auth, "/v1/predictions", {"model": "glyphs", "predictions": [one]})
    assert none.status_code == 409
    assert none.get_json()["error"]["code"] == "no_active_contract"
    named = ok(
        post(
            client,
            auth,
            "/v1/predictions",
            {"model": "glyphs", "contract_id": v1["id"], "predictions": [one]},
        )
    )
    assert named["contract_id"] == v1["id"]


def test_backfill_binds_to_the_active_contract_and_reads_by_start_end(
    client: FlaskClient, auth: Auth
) -> None:
    contract = _multiclass_contract(client, auth)
    old = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rows = [
        {
            "id": f"b{i}",
            "ts": iso(old + timedelta(minutes=7 * i)),
            "cohort": {},
            "logits": [float(i % 3), 1.0, 0.5],
            "label": i % 3,
        }
        for i in range(40)
    ]
    accepted = _send_predictions(client, auth, "glyphs", rows)
    assert accepted["contract_id"] == contract["id"]
    _send_labels(client, auth, "glyphs", rows)
    assert reading(client, auth, "glyphs")["n_predictions"] == 0
    day = "start=2026-03-01T00:00:00Z&end=2026-03-02T00:00:00Z"
    # Seven minutes apart, each label is alone in its 5-minute bucket: it waits for the fold,
    # which the read above ran first (few labels waited).
    got = reading(client, auth, "glyphs", day)
    assert (got["n_labeled"], got["labels_unfolded"]) == (40, 0)
    assert got == reading(client, auth, "glyphs", f"{day}&consistent=true")
    assert got["window"]["start"] == "2026-03-01T00:00:00.000000Z"
    half = reading(client, auth, "glyphs", "start=2026-03-01T12:00:00Z&end=2026-03-01T14:20:00Z")
    assert half["n_labeled"] == 20
    recent = _random_predictions(60, seed=13, prefix="new")
    _send_predictions(client, auth, "glyphs", recent)
    _send_labels(client, auth, "glyphs", recent)
    again = reading(client, auth, "glyphs", "start=2026-03-01T00:00:00Z&end=2026-03-02T00:00:00Z")
    assert again["n_labeled"] == 40
    assert again["drift"]["refit_temperature"] is not None


def test_windows_spanning_two_contract_versions_use_the_newest(
    client: FlaskClient, auth: Auth
) -> None:
    first = _multiclass_contract(client, auth)
    rows = _random_predictions(30, seed=6)
    _send_predictions(client, auth, "glyphs", rows[:10])
    second = _multiclass_contract(client, auth)
    _send_predictions(client, auth, "glyphs", rows[10:])
    _send_labels(client, auth, "glyphs", rows)
    got = reading(client, auth, "glyphs")
    assert got["contract"]["id"] == second["id"]
    assert got["n_predictions"] == 20
    shares = {s["contract_id"]: s["n_labeled"] for s in got["contracts_in_window"]}
    assert shares == {first["id"]: 10, second["id"]: 20}
    assert "version 2" in got["notes"][0]


def test_cohort_values_are_capped(database_url: str) -> None:
    app = create_app(
        {"database_url": database_url, "admin_token": ADMIN_TOKEN, "max_cohort_values": 2}
    )
    client = app.test_client()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    try:
        assert (
            client.post("/v1/contracts/fit", json=fit_body("capped"), headers=headers).status_code
            == 201
        )
        preds = [
            {"id": f"c{i}", "ts": minutes_ago(1), "cohort": {"region": r}, "logits": [1, 0, 0]}
            for i, r in enumerate(["a", "b", "c", "d", "a"])
        ]
        ok(
            client.post(
                "/v1/predictions", json={"model": "capped", "predictions": preds}, headers=headers
            )
        )
        slices = ok(client.get("/v1/models/capped/cohorts", headers=headers))["slices"]
        counts = {s["cohort"]: s["n_predictions"] for s in slices}
        assert counts == {"all": 5, "region=a": 2, "region=b": 1, "region=__other__": 2}
        other = ok(
            client.get("/v1/models/capped/calibration?cohort=region:__other__", headers=headers)
        )
        assert other["n_predictions"] == 2
    finally:
        from tests.integration.conftest import wipe

        wipe(app.extensions["calmon.database"])
        app.extensions["calmon.database"].dispose()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("window=-1h", "window"),
        ("window=0h", "window"),
        ("window=5y", "window"),
        ("window=401d", "window"),
        ("window=1.5h", "window"),
        ("start=2026-03-02T00:00:00Z&end=2026-03-01T00:00:00Z", "end"),
        ("start=2026-03-01T00:00:00Z", "end"),
        ("window=1h&start=2026-03-01T00:00:00Z&end=2026-03-02T00:00:00Z", "window"),
        ("start=soon&end=2026-03-01T00:00:00Z", "start"),
        ("cohort=region", "cohort"),
        ("cohort=:x", "cohort"),
        ("windows=1h", "windows"),
    ],
)
def test_bad_reading_parameters_are_422(
    client: FlaskClient, auth: Auth, query: str, field: str
) -> None:
    _multiclass_contract(client, auth)
    response = client.get(f"/v1/models/glyphs/calibration?{query}", headers=auth.headers())
    assert response.status_code == 422, response.get_json()
    assert field in {d["field"] for d in response.get_json()["error"]["details"]}


def test_unknown_model_readings_are_404(client: FlaskClient, auth: Auth) -> None:
    for url in ("/v1/models/nobody/calibration", "/v1/models/nobody/cohorts"):
        assert client.get(url, headers=auth.headers()).status_code == 404


def test_refit_temperature_is_measured_per_cohort(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    rng = np.random.default_rng(8)
    rows = []
    for i in range(400):
        z = rng.normal(size=3) * 1.5
        y = int(rng.choice(3, p=np.exp(z) / np.exp(z).sum()))
        sharp = i % 2 == 0
        rows.append(
            {
                "id": f"r{i}",
                "ts": minutes_ago(20),
                "label": y,
                "cohort": {"lang": "tr" if sharp else "hu"},
                "logits": (z * (3.0 if sharp else 1.0)).tolist(),
            }
        )
    _send_predictions(client, auth, "glyphs", rows)
    _send_labels(client, auth, "glyphs", rows)
    sharp = reading(client, auth, "glyphs", "cohort=lang:tr")["drift"]["refit_temperature"]
    plain = reading(client, auth, "glyphs", "cohort=lang:hu")["drift"]["refit_temperature"]
    assert sharp > 2.0 > 1.5 > plain


@pytest.mark.slow
def test_a_batch_spread_over_thousands_of_buckets_is_stored_and_labeled(
    client: FlaskClient, auth: Auth
) -> None:
    """A backfill of 3,000 predictions five minutes apart touches about 10,000 buckets (three
    slices each, 5m and 1h); ingest updates them all in one request. The labels, days late and
    each alone in its bucket, are acknowledged and wait for the fold, too many for a read to
    fold first: it states them, and consistent=true counts them all."""
    _multiclass_contract(client, auth, model="backfill")
    rows = _random_predictions(3000, seed=11, prefix="b")
    start = datetime.now(UTC) - timedelta(days=12)
    for i, row in enumerate(rows):
        row["ts"] = iso(start + timedelta(minutes=5 * i))
    assert _send_predictions(client, auth, "backfill", rows)["accepted"] == 3000
    assert _send_labels(client, auth, "backfill", rows)["joined"] == 3000
    before = reading(client, auth, "backfill", "window=30d")
    assert (before["n_labeled"], before["labels_unfolded"]) == (0, 3000)
    assert before["last_fold_at"] is None
    got = reading(client, auth, "backfill", "window=30d&consistent=true")
    assert (got["n_predictions"], got["n_labeled"]) == (3000, 3000)
    assert got["labels_unfolded"] == 0 and got["last_fold_at"] is not None
    lang = reading(client, auth, "backfill", "window=30d&cohort=lang:tr")
    assert lang["n_labeled"] == 1000
