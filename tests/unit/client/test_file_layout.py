"""The one column layout of ``calmon ingest`` and ``calmon fit`` files: the logits as a list
column or one column per class, in CSV, Parquet and Arrow alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from service.cli.datafiles import DataFileError, read_labeled_set
from service.client.backfill import UnreadableFile, class_columns, labeled_rows

LOGITS = np.array([[2.5, -0.5, 0.25], [0.0, 1.5, -1.0], [0.125, 0.0, 3.0]])
NAMES = ["billing", "tech", "other"]


def _per_class(path: Path) -> Path:
    table = pa.table({**{f"logit_{k}": LOGITS[:, k] for k in range(3)}, "label": NAMES})
    if path.suffix == ".csv":
        pa_csv.write_csv(table, path)
    elif path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
    return path


def _list_column(path: Path) -> Path:
    if path.suffix == ".csv":
        cells = [json.dumps(row) for row in LOGITS.tolist()]
        pa_csv.write_csv(pa.table({"logits": cells, "label": [0, 1, 2]}), path)
    else:
        pq.write_table(pa.table({"logits": LOGITS.tolist(), "label": [0, 1, 2]}), path)
    return path


@pytest.mark.parametrize("name", ["set.csv", "set.parquet", "set.arrow"])
def test_one_column_per_class_reads_as_the_logits_in_class_order(tmp_path: Path, name: str) -> None:
    inputs, labels = labeled_rows(_per_class(tmp_path / name))
    np.testing.assert_array_equal(inputs, LOGITS)
    assert labels == NAMES
    read = read_labeled_set(tmp_path / name, task="multiclass", classes=NAMES)
    np.testing.assert_array_equal(read.inputs, LOGITS)
    assert read.labels.tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", ["set.csv", "set.parquet"])
def test_a_logits_list_column_reads_the_same(tmp_path: Path, name: str) -> None:
    read = read_labeled_set(_list_column(tmp_path / name), task="multiclass", classes=NAMES)
    np.testing.assert_array_equal(read.inputs, LOGITS)
    assert read.labels.tolist() == [0, 1, 2]


def test_class_columns_are_ordered_by_index_and_complete() -> None:
    assert class_columns(["id", "logit_1", "region", "logit_0"]) == ["logit_0", "logit_1"]
    assert class_columns(["id", "ts", "logits"]) == []
    with pytest.raises(UnreadableFile, match=r"logit_0 \.\. logit_1 expected"):
        class_columns(["logit_0", "logit_2"])


def test_both_forms_at_once_or_too_few_classes_are_refused(tmp_path: Path) -> None:
    both = tmp_path / "both.parquet"
    pq.write_table(
        pa.table({"logits": LOGITS.tolist(), "logit_0": LOGITS[:, 0], "label": [0] * 3}), both
    )
    with pytest.raises(DataFileError, match="give the logits once"):
        read_labeled_set(both, task="multiclass", classes=NAMES)
    two = tmp_path / "two.csv"
    pa_csv.write_csv(pa.table({"logit_0": [1.0], "logit_1": [0.0], "label": [0]}), two)
    with pytest.raises(DataFileError, match=r"3 logits per row \(a logits column or logit_0"):
        read_labeled_set(two, task="multiclass", classes=NAMES)


def test_a_binary_set_reads_its_score_column(tmp_path: Path) -> None:
    path = tmp_path / "binary.csv"
    pa_csv.write_csv(pa.table({"score": [0.9, 0.2], "label": ["positive", "negative"]}), path)
    read = read_labeled_set(path, task="binary", classes=["negative", "positive"])
    assert read.inputs.tolist() == [0.9, 0.2] and read.labels.tolist() == [1, 0]
