"""``calmon fit`` against a served calmon: Parquet, Arrow and CSV sets in the column layout of
``calmon ingest``, and the same content fitted twice registering one version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from service.cli import main
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import contract_fields
from tests.integration.test_served import Served, serving_fresh

pytestmark = pytest.mark.slow

CLASSES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_fresh(tmp_path_factory.mktemp("fit-cli")) as server:
        yield server


def labeled(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    logits = np.round(rng.normal(size=(n, 3)) + 2.5 * np.eye(3)[labels], 6)
    return logits, labels


def per_class(logits: np.ndarray, labels: np.ndarray, first: int) -> pa.Table:
    """A predictions file's columns, the logits one column per class, and the labels."""
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    n = len(labels)
    return pa.table(
        {
            "id": [f"r{first + i}" for i in range(n)],
            "ts": pa.array([now] * n, pa.timestamp("us", "UTC")),
            **{f"logit_{k}": logits[:, k] for k in range(3)},
            "region": ["emea"] * n,
            "label": [CLASSES[i] for i in labels],
        }
    )


def list_column_csv(logits: np.ndarray, labels: np.ndarray, path: Path) -> Path:
    """The same set as CSV, the logits a JSON array per row, the labels class indices."""
    table = pa.table(
        {"logits": [json.dumps(row) for row in logits.tolist()], "label": labels.tolist()}
    )
    pa_csv.write_csv(table, path)
    return path


def fit(
    served: Served, spec: Path, fit_set: Path, eval_set: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, object], str]:
    options = ["--url", served.url, "--token", ADMIN_TOKEN, "--spec", str(spec)]
    code = main(["fit", *options, "--fit", str(fit_set), "--eval", str(eval_set)])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else {}, err


def test_the_same_content_in_any_format_registers_one_version(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(contract_fields("fit-cli", classes=CLASSES)))
    fit_logits, fit_labels = labeled(1, 600)
    eval_logits, eval_labels = labeled(2, 400)
    fit_parquet = tmp_path / "fit.parquet"
    pq.write_table(per_class(fit_logits, fit_labels, 0), fit_parquet)
    eval_arrow = tmp_path / "eval.arrow"
    with pa.ipc.new_file(eval_arrow, per_class(eval_logits, eval_labels, 600).schema) as w:
        w.write_table(per_class(eval_logits, eval_labels, 600))

    code, first, err = fit(served, spec, fit_parquet, eval_arrow, capsys)
    assert code == 0, err
    assert first["version"] == 1 and first["stored_before"] is False

    code, again, err = fit(served, spec, fit_parquet, eval_arrow, capsys)
    assert code == 0, err
    assert again == {**first, "stored_before": True}
    assert "registered before" in err and "no new version" in err

    # The same sets as CSV with a logits list column and class indices: the same content.
    fit_csv = list_column_csv(fit_logits, fit_labels, tmp_path / "fit.csv")
    eval_csv = list_column_csv(eval_logits, eval_labels, tmp_path / "eval.csv")
    code, as_csv, err = fit(served, spec, fit_csv, eval_csv, capsys)
    assert code == 0, err
    assert as_csv == again

    status, listed = served.call("GET", "/v1/contracts?model=fit-cli")
    assert status == 200 and [c["version"] for c in listed["contracts"]] == [1]

    # Other sets are other content: a new version.
    code, other, err = fit(served, spec, eval_arrow, fit_parquet, capsys)
    assert code == 0, err
    assert other["version"] == 2 and other["stored_before"] is False

    # The same columns without the labels are a predictions file for calmon ingest.
    predictions = tmp_path / "predictions.parquet"
    pq.write_table(per_class(fit_logits, fit_labels, 0).drop_columns(["label"]), predictions)
    options = ["--url", served.url, "--token", ADMIN_TOKEN, "--model", "fit-cli"]
    assert main(["ingest", "predictions", str(predictions), *options]) == 0
    assert "600 new predictions" in capsys.readouterr().out
    status, reading = served.call("GET", "/v1/models/fit-cli/calibration?window=1h")
    assert status == 200 and reading["n_predictions"] == 600


def test_a_set_without_the_classes_logits_names_the_layout(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(contract_fields("fit-cli-bad", classes=CLASSES)))
    logits, labels = labeled(3, 50)
    table = per_class(logits, labels, 0).drop_columns(["logit_2"])
    path = tmp_path / "two.parquet"
    pq.write_table(table, path)
    code, _, err = fit(served, spec, path, path, capsys)
    assert code == 2
    assert "3 logits per row (a logits column or logit_0 .. logit_2)" in err
