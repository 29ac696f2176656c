"""Reading labeled sets from files for ``calmon fit`` (read here, sent to the service).

CSV, Parquet and Arrow files have the columns of a predictions file for ``calmon ingest``
(``service.client.backfill``) and a ``label`` column (class index or class name): the logits as
a ``logits`` list column (a JSON array per CSV cell) or one column per class, ``logit_0`` ..
``logit_{K-1}`` in the order of the contract's classes, or (binary) a ``score`` column; other
columns (``id``, ``ts``, cohort keys) are ignored. NPZ: arrays ``labels`` and ``logits`` (N, K)
or ``scores`` (N,).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from service.calibration.vocabulary import Task
from service.client.backfill import UnreadableFile, labeled_rows
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
    """Read ``path`` (.npz, or a .csv, .parquet or .arrow file) as a labeled set for ``task``."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            key = "logits" if task == Task.MULTICLASS else "scores"
            if key not in data or "labels" not in data:
                raise DataFileError(f"{path}: needs arrays '{key}' and 'labels'")
            return LabeledSet(
                np.asarray(data[key], dtype=np.float64), np.asarray(data["labels"], dtype=np.int64)
            )
    try:
        inputs, raw_labels = labeled_rows(path)
    except UnreadableFile as exc:
        raise DataFileError(str(exc)) from None
    expected = 2 if task == Task.MULTICLASS else 1
    if inputs.ndim != expected or (task == Task.MULTICLASS and inputs.shape[1] != len(classes)):
        what = (
            f"{len(classes)} logits per row (a logits column or logit_0 .. "
            f"logit_{len(classes) - 1})"
            if task == Task.MULTICLASS
            else "a score column"
        )
        raise DataFileError(f"{path}: a {task} set needs {what}")
    labels = [
        _label_index("" if raw is None else str(raw), classes, f"{path}: row {row:,}")
        for row, raw in enumerate(raw_labels, start=1)
    ]
    _progress(len(labels), len(labels), progress)
    return LabeledSet(inputs, np.asarray(labels, dtype=np.int64))
