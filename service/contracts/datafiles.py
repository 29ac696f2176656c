"""Reading labeled sets from CSV or NPZ files for ``calmon fit``.

CSV: a header; a ``label`` column (class index or class name) and either ``score`` (binary) or
logit columns (multiclass: every other column, in header order). NPZ: arrays ``labels`` and
``logits`` (N, K) or ``scores`` (N,).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from service.calibration.vocabulary import Task
from service.contracts.labeled_sets import LabeledSet


class DataFileError(ValueError):
    """A file that cannot be read as a labeled set; the message names the file and row."""


def _progress(done: int, total: int, stream: TextIO) -> None:
    if stream.isatty() or total >= 100_000:
        width = 30
        filled = int(width * done / max(total, 1))
        stream.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} rows")
        if done >= total:
            stream.write("\n")
        stream.flush()


def _label_index(raw: str, classes: Sequence[str], where: str) -> int:
    if raw in classes:
        return classes.index(raw)
    try:
        index = int(raw)
    except ValueError:
        raise DataFileError(f"{where}: unknown class {raw!r}") from None
    if not 0 <= index < len(classes):
        raise DataFileError(f"{where}: class index {index} outside 0..{len(classes) - 1}")
    return index


def read_labeled_set(
    path: Path, *, task: str, classes: Sequence[str], progress: TextIO = sys.stderr
) -> LabeledSet:
    """Read ``path`` (.csv or .npz) as a labeled set for ``task``."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            key = "logits" if task == Task.MULTICLASS else "scores"
            if key not in data or "labels" not in data:
                raise DataFileError(f"{path}: needs arrays '{key}' and 'labels'")
            return LabeledSet(
                np.asarray(data[key], dtype=np.float64), np.asarray(data["labels"], dtype=np.int64)
            )
    with path.open(newline="") as handle:
        total = sum(1 for _ in handle) - 1
        handle.seek(0)
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or "label" not in header:
            raise DataFileError(f"{path}: the header needs a 'label' column")
        label_at = header.index("label")
        value_columns = [i for i, name in enumerate(header) if i != label_at]
        if task == Task.BINARY:
            if "score" not in header:
                raise DataFileError(f"{path}: a binary set needs a 'score' column")
            value_columns = [header.index("score")]
        elif len(value_columns) != len(classes):
            raise DataFileError(
                f"{path}: {len(value_columns)} logit columns for {len(classes)} classes"
            )
        inputs: list[Any] = []
        labels: list[int] = []
        for row_number, row in enumerate(reader, start=2):
            where = f"{path}:{row_number}"
            try:
                values = [float(row[i]) for i in value_columns]
            except (ValueError, IndexError):
                raise DataFileError(f"{where}: expected numbers") from None
            inputs.append(values if task == Task.MULTICLASS else values[0])
            labels.append(_label_index(row[label_at], classes, where))
            if len(labels) % 100_000 == 0:
                _progress(len(labels), total, progress)
        _progress(len(labels), total, progress)
    return LabeledSet(np.asarray(inputs, dtype=np.float64), np.asarray(labels, dtype=np.int64))
