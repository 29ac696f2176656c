"""``calmon ingest``: send a file of predictions or labels through the client.

Files: CSV (``.csv``), Parquet (``.parquet``, ``.pq``) or Arrow (``.arrow``, ``.arrows``,
``.feather``, ``.ipc``: the IPC file or stream format), read in record batches, with the columns
of an Arrow body: predictions ``id``, ``ts``, the logits (a ``logits`` list column, or one column
per class, ``logit_0`` .. ``logit_{K-1}``) or ``score``, one column per cohort key; labels
``id``, ``label``, ``ts``. ``calmon fit`` reads its labeled sets in the same layout, with a
``label`` column (``labeled_rows``). In a CSV file ``logits`` is a JSON array per row
(``"[1.2, -0.3, 0.5]"``) and ``ts`` RFC 3339 text with a zone. An empty cohort cell (an empty
CSV cell, a null) leaves that key out of that row's cohort. A logits cell that is not an array
of numbers as wide as the rows before it stops the run with an error naming its row (counted
from 1, the header not counted) and column. Ingest is idempotent by id, so a run cut short can
be repeated whole: what was stored before counts as duplicates, not twice.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from service.client.calmon import Calmon
from service.client.columns import TIMESTAMP

#: Rows read per record batch.
READ_ROWS = 50_000
#: Seconds between two progress lines when the output is not a terminal (a terminal's line is
#: redrawn every ``TTY_PROGRESS_SECONDS``).
PROGRESS_SECONDS = 5.0
TTY_PROGRESS_SECONDS = 0.5


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


#: A time text that ends in a zone: ``Z`` or an offset.
_ZONED = r"([Zz]|[+-]\d\d(:?\d\d)?)$"


def _times(batch: pa.RecordBatch, assume_utc: bool = False) -> np.ndarray:
    """The ``ts`` column as ``datetime64[us]`` (UTC). Times without a zone (naive timestamps,
    text without an offset) are refused, or with ``assume_utc`` read as UTC."""
    column = batch.column("ts")
    try:
        if pa.types.is_timestamp(column.type) and column.type.tz is None:
            if not assume_utc:
                raise UnreadableFile(
                    "ts: timestamps without a time zone (--assume-utc reads them as UTC)"
                )
            column = column.cast(pa.timestamp("us"))
        elif assume_utc and (
            pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        ):
            zoned = pc.match_substring_regex(column, _ZONED)
            column = pc.if_else(zoned, column, pc.binary_join_element_wise(column, "Z", ""))
        if not pa.types.is_timestamp(column.type) or column.type.tz is not None:
            column = column.cast(TIMESTAMP)
        return column.cast(pa.int64()).to_numpy().astype("datetime64[us]")
    except pa.ArrowException as exc:
        hint = "" if assume_utc else " (--assume-utc reads times without a zone as UTC)"
        raise UnreadableFile(f"ts: {exc}{hint}") from None


def class_columns(names: list[str]) -> list[str]:
    """The one-column-per-class logits among ``names``: ``logit_0`` .. ``logit_{K-1}`` in class
    order (the contract's ``classes``); ``UnreadableFile`` when some index is missing."""
    found = {int(n[6:]): n for n in names if re.fullmatch(r"logit_\d+", n)}
    if found and sorted(found) != list(range(len(found))):
        raise UnreadableFile(
            f"columns logit_0 .. logit_{len(found) - 1} expected, got {', '.join(found.values())}"
        )
    return [found[i] for i in range(len(found))]


def _inputs(batch: pa.RecordBatch, first_row: int) -> np.ndarray:
    """The logits as (N, K) float64 (a ``logits`` list column, or one column per class,
    ``logit_0`` .. ``logit_{K-1}``) or the scores as (N,) (a ``score`` column);
    ``UnreadableFile`` naming the file row (``first_row`` is the batch's first) of a logits cell
    that is not an array of numbers as wide as the rows before it."""
    names = batch.schema.names
    per_class = class_columns(names)
    if "logits" in names and per_class:
        raise UnreadableFile("give the logits once: a logits column or logit_0 .. logit_K-1")
    if per_class:
        try:
            columns = [batch.column(n).cast(pa.float64()) for n in per_class]
        except pa.ArrowException as exc:
            raise UnreadableFile(f"logit columns: {exc}") from None
        if any(c.null_count for c in columns):
            raise UnreadableFile("logit columns: empty cells")
        return np.column_stack([c.to_numpy(zero_copy_only=False) for c in columns])
    if "logits" in names:
        column = batch.column("logits")
        rows = column.to_pylist()
        if pa.types.is_string(column.type):
            rows = [_json_cell(v, first_row + i) for i, v in enumerate(rows)]
        try:
            return np.array(rows, dtype=np.float64)
        except (ValueError, TypeError):
            row, problem = _bad_logits(rows)
            raise UnreadableFile(f"row {first_row + row:,}, column logits: {problem}") from None
    if "score" in names:
        return batch.column("score").to_numpy(zero_copy_only=False).astype(np.float64)
    raise UnreadableFile("expected a logits column, logit_0 .. logit_K-1 columns or a score column")


def labeled_rows(path: Path) -> tuple[np.ndarray, list[Any]]:
    """The inputs (as ``_inputs`` reads them) and the ``label`` column of every row of a CSV,
    Parquet or Arrow file: a labeled set in the layout of a predictions file."""
    batches, _ = record_batches(path)
    inputs: list[np.ndarray] = []
    labels: list[Any] = []
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            _required(batch, ("label",))
            inputs.append(_inputs(batch, len(labels) + 1))
            labels.extend(batch.column("label").to_pylist())
    except pa.ArrowException as exc:
        raise UnreadableFile(f"cannot read {path} after {len(labels):,} rows: {exc}") from None
    except UnreadableFile as exc:
        raise UnreadableFile(f"{path}: {exc}") from None
    if not inputs:
        raise UnreadableFile(f"{path}: no rows")
    return np.concatenate(inputs), labels


def _json_cell(text: str | None, row: int) -> Any:
    try:
        return json.loads(text or "")
    except ValueError as exc:
        raise UnreadableFile(
            f"row {row:,}, column logits: expected a JSON array of numbers: {exc}"
        ) from None


def _bad_logits(rows: list[Any]) -> tuple[int, str]:
    """The index of the first row that is not a list of numbers as long as the first row's,
    and what is wrong with it."""
    width = None
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in row
        ):
            return i, f"expected an array of numbers, got {json.dumps(row)[:80]}"
        if width is None:
            width = len(row)
        elif len(row) != width:
            return i, f"{len(row)} logits where the rows before hold {width}"
    return 0, "expected arrays of numbers"


def _cohort_column(column: pa.Array) -> list[str | None]:
    """A cohort key's values as text, an empty cell (empty text or null) as None: the key is
    left out of that row's cohort."""
    text = column.cast(pa.string())
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text).to_pylist()


def _required(batch: pa.RecordBatch, names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise UnreadableFile(f"missing column(s): {', '.join(missing)}")


def log_batch(
    client: Calmon,
    kind: str,
    batch: pa.RecordBatch,
    first_row: int = 1,
    assume_utc: bool = False,
) -> int:
    """Queue one record batch of ``kind`` (``predictions`` or ``labels``) whose first row is
    the file's row ``first_row``; rows queued. ``assume_utc``: times without a zone are UTC."""
    if batch.num_rows == 0:
        return 0
    if kind == "labels":
        _required(batch, ("id", "label", "ts"))
        labels = batch.column("label").to_pylist()
        return client.log_labels(batch.column("id").to_pylist(), labels, _times(batch, assume_utc))
    _required(batch, ("id", "ts"))
    cohort = {
        name: _cohort_column(batch.column(name))
        for name in batch.schema.names
        if name not in ("id", "ts", "logits", "score", *class_columns(batch.schema.names))
    }
    return client.log_predictions(
        batch.column("id").to_pylist(),
        _inputs(batch, first_row),
        _times(batch, assume_utc),
        cohort or None,
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
    #: The status and JSON reply of the last batch the service refused, or None.
    last_rejection: dict[str, Any] | None = None


def ingest_file(
    client: Calmon,
    kind: str,
    path: Path,
    err: TextIO | None = None,
    wait: float = 600.0,
    progress_seconds: float | None = None,
    assume_utc: bool = False,
) -> IngestReport:
    """Send every row of ``path`` through ``client`` (its model), showing progress on ``err``
    (default: standard error) every ``progress_seconds`` (default: ``TTY_PROGRESS_SECONDS`` on
    a terminal, else ``PROGRESS_SECONDS``) while it reads and sends; wait at most ``wait``
    seconds at the end for delivery. ``assume_utc``: times without a zone are read as UTC."""
    batches, total = record_batches(path)
    with _Progress(
        err or sys.stderr, total, lambda: client.stats.sent, progress_seconds
    ) as progress:
        try:
            for batch in batches:
                progress.read += log_batch(client, kind, batch, progress.read + 1, assume_utc)
        except pa.ArrowException as exc:
            read = progress.read
            raise UnreadableFile(f"cannot read {path} after {read:,} rows: {exc}") from None
        except UnreadableFile as exc:
            raise UnreadableFile(f"{path}: {exc}") from None
        client.close(timeout=wait)
    stats = client.stats
    progress.show(final=True)
    new = stats.accepted if kind == "predictions" else stats.joined + stats.pending
    return IngestReport(
        progress.read,
        stats.sent,
        new,
        stats.duplicates,
        stats.rejected,
        stats.dropped,
        stats.last_error,
        stats.last_rejection,
    )


class _Progress:
    """Rows read and acknowledged, drawn by a thread of its own every ``seconds`` while the
    block runs (the rows are acknowledged while the file is read, and after, while the client
    flushes): a redrawn line on a terminal, else one line each time."""

    def __init__(
        self,
        stream: TextIO,
        total: int | None,
        acknowledged: Callable[[], int],
        seconds: float | None = None,
    ) -> None:
        self.stream, self.total, self.acknowledged = stream, total, acknowledged
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.seconds = seconds or (TTY_PROGRESS_SECONDS if self.tty else PROGRESS_SECONDS)
        #: Rows read so far (set by the reader).
        self.read = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._tick, name="calmon-ingest-progress")

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _tick(self) -> None:
        while not self._stop.wait(self.seconds):
            self.show()

    def show(self, final: bool = False) -> None:
        sent = self.acknowledged()
        text = f"{self.read:,} rows read, {sent:,} acknowledged"
        if self.total:
            share = min(sent / self.total, 1.0)
            text = f"[{'#' * round(share * 24):<24}] {share:4.0%}  {text} of {self.total:,}"
        end = "\n" if final or not self.tty else ""
        with self._lock:
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
