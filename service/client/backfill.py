"""``calmon ingest``: send a file of predictions or labels through the client.

Files: CSV (``.csv``), Parquet (``.parquet``, ``.pq``) or Arrow (``.arrow``, ``.arrows``,
``.feather``, ``.ipc``: the IPC file or stream format), read in record batches, with the columns
of an Arrow body: predictions ``id``, ``ts``, ``logits`` or ``score``, one column per cohort key;
labels ``id``, ``label``, ``ts``. In a CSV file ``logits`` is a JSON array per row
(``"[1.2, -0.3, 0.5]"``) and ``ts`` RFC 3339 text with a zone. Ingest is idempotent by id, so
a run cut short can be repeated whole: what was stored before counts as duplicates, not twice.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from service.client.calmon import Calmon
from service.client.columns import TIMESTAMP

#: Rows read per record batch.
READ_ROWS = 50_000


class UnreadableFile(ValueError):
    """The file cannot be read, or lacks a column the kind of rows needs."""


def _csv_batches(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    options = pa_csv.ConvertOptions(
        column_types={"id": pa.string(), "ts": pa.string(), "logits": pa.string()},
        strings_can_be_null=False,
    )
    reader = pa_csv.open_csv(
        path,
        read_options=pa_csv.ReadOptions(block_size=8 << 20),
        convert_options=options,
    )
    return iter(reader), None


def record_batches(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    """The file's record batches and its row count when the format states it."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return _csv_batches(path)
        if suffix in (".parquet", ".pq"):
            parquet = pq.ParquetFile(path)
            return parquet.iter_batches(batch_size=READ_ROWS), parquet.metadata.num_rows
        if suffix in (".arrow", ".arrows", ".feather", ".ipc"):
            source = pa.memory_map(str(path))
            try:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                return batches, int(reader.count_rows())
            except pa.ArrowInvalid:
                source.seek(0)
                return iter(pa.ipc.open_stream(source)), None
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableFile(f"cannot read {path}: {exc}") from None
    raise UnreadableFile(f"{path}: expected a .csv, .parquet or .arrow file")


def _times(batch: pa.RecordBatch) -> np.ndarray:
    column = batch.column("ts")
    try:
        if pa.types.is_timestamp(column.type) and column.type.tz is None:
            raise UnreadableFile("ts: timestamps without a time zone")
        return column.cast(TIMESTAMP).cast(pa.int64()).to_numpy().astype("datetime64[us]")
    except pa.ArrowException as exc:
        raise UnreadableFile(f"ts: {exc}") from None


def _inputs(batch: pa.RecordBatch) -> np.ndarray:
    names = batch.schema.names
    if "logits" in names:
        column = batch.column("logits")
        if pa.types.is_string(column.type):
            try:
                return np.array([json.loads(v) for v in column.to_pylist()], dtype=np.float64)
            except (ValueError, TypeError) as exc:
                raise UnreadableFile(f"logits: expected a JSON array of numbers: {exc}") from None
        rows = column.to_pylist()
        return np.array(rows, dtype=np.float64)
    if "score" in names:
        return batch.column("score").to_numpy(zero_copy_only=False).astype(np.float64)
    raise UnreadableFile("expected a logits or a score column")


def _required(batch: pa.RecordBatch, names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise UnreadableFile(f"missing column(s): {', '.join(missing)}")


def log_batch(client: Calmon, kind: str, batch: pa.RecordBatch) -> int:
    """Queue one record batch of ``kind`` (``predictions`` or ``labels``); rows queued."""
    if batch.num_rows == 0:
        return 0
    if kind == "labels":
        _required(batch, ("id", "label", "ts"))
        labels = batch.column("label").to_pylist()
        return client.log_labels(batch.column("id").to_pylist(), labels, _times(batch))
    _required(batch, ("id", "ts"))
    cohort = {
        name: batch.column(name).cast(pa.string()).to_pylist()
        for name in batch.schema.names
        if name not in ("id", "ts", "logits", "score")
    }
    return client.log_predictions(
        batch.column("id").to_pylist(), _inputs(batch), _times(batch), cohort or None
    )


@dataclass(frozen=True)
class IngestReport:
    read: int
    sent: int
    new: int
    duplicates: int
    rejected: int
    dropped: int
    last_error: str | None


def ingest_file(
    client: Calmon, kind: str, path: Path, err: TextIO = sys.stderr, wait: float = 600.0
) -> IngestReport:
    """Send every row of ``path`` through ``client`` (its model), showing progress on ``err``;
    wait at most ``wait`` seconds at the end for delivery."""
    batches, total = record_batches(path)
    progress = _Progress(err, total)
    read = 0
    try:
        for batch in batches:
            read += log_batch(client, kind, batch)
            progress.show(read, client.stats.sent)
    except pa.ArrowException as exc:
        raise UnreadableFile(f"cannot read {path} after {read:,} rows: {exc}") from None
    client.close(timeout=wait)
    stats = client.stats
    progress.show(read, stats.sent, final=True)
    new = stats.accepted if kind == "predictions" else stats.joined + stats.pending
    return IngestReport(
        read, stats.sent, new, stats.duplicates, stats.rejected, stats.dropped, stats.last_error
    )


class _Progress:
    """Rows read and acknowledged: a redrawn line on a terminal, else a line every 5 s."""

    def __init__(self, stream: TextIO, total: int | None) -> None:
        self.stream, self.total = stream, total
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last = 0.0

    def show(self, read: int, sent: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and not self.tty and now - self._last < 5:
            return
        self._last = now
        text = f"{read:,} rows read, {sent:,} acknowledged"
        if self.total:
            share = min(sent / self.total, 1.0)
            text = f"[{'#' * round(share * 24):<24}] {share:4.0%}  {text} of {self.total:,}"
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()


def describe(report: IngestReport, kind: str) -> str:
    """The closing summary line."""
    what = "new predictions" if kind == "predictions" else "labels applied (joined or waiting)"
    return (
        f"{report.sent:,} of {report.read:,} rows acknowledged: {report.new:,} {what},"
        f" {report.duplicates:,} already stored; {report.rejected:,} rejected,"
        f" {report.dropped:,} not delivered"
    )
