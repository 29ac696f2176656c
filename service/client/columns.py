"""Batches of predictions and labels as Arrow record batches, from lists, numpy arrays or pandas
columns, in the column layout ``POST /v1/predictions`` and ``/v1/labels`` take as an Arrow IPC
stream: ``id`` (string), ``ts`` (timestamp[us, UTC]), ``logits`` (fixed-size list of K float64)
or ``score`` (float64), one string column per cohort key; labels ``id``, ``label``, ``ts``.

Times: a ``datetime`` with a zone, a zone-aware pandas column, or numpy ``datetime64`` (read as
UTC); a naive ``datetime`` is read as UTC too. ``None`` is the time of the call.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

TIMESTAMP = pa.timestamp("us", "UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Pending:
    """One call's rows as given (converted to Arrow by the sender thread, off the caller's
    time). ``kind`` is ``predictions`` or ``labels``; ``ts`` a scalar time or a column."""

    kind: str
    n: int
    ids: Any
    values: Any
    ts: Any
    cohort: Mapping[str, Any] | None


def pending(kind: str, ids: Any, values: Any, ts: Any, cohort: Mapping[str, Any] | None) -> Pending:
    """Check the lengths and shapes of one call's columns (``ValueError`` naming the argument);
    cheap, so that it runs on the caller's thread."""
    n = len(ids)
    if n == 0:
        raise ValueError("ids is empty")
    if kind == "predictions":
        values = np.asarray(values, dtype=np.float64)
        if values.ndim not in (1, 2) or len(values) != n:
            raise ValueError(
                f"logits_or_scores must be (N, K) logits or (N,) scores for N = {n} ids, "
                f"got shape {values.shape}"
            )
    elif len(values) != n:
        raise ValueError(f"labels holds {len(values)} values for {n} ids")
    if ts is None:
        ts = datetime.now(UTC)
    elif not isinstance(ts, datetime | np.datetime64 | Micros) and len(ts) != n:
        raise ValueError(f"ts holds {len(ts)} times for {n} ids")
    for key, value in (cohort or {}).items():
        if not isinstance(value, str) and len(value) != n:
            raise ValueError(f"cohort[{key!r}] holds {len(value)} values for {n} ids")
    return Pending(kind, n, ids, values, ts, cohort)


def _strings(values: Any) -> pa.Array:
    array = pa.array(values.tolist() if isinstance(values, np.ndarray) else values)
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    return array if pa.types.is_string(array.type) else array.cast(pa.string())


@dataclass(frozen=True)
class Micros:
    """Times as int64 microseconds since the epoch, UTC (merged calls)."""

    values: np.ndarray


def _micros(ts: Any, n: int) -> np.ndarray:
    """One call's times as int64 microseconds since the epoch."""
    if isinstance(ts, Micros):
        return ts.values
    if isinstance(ts, datetime):
        ts = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
        return np.full(n, (ts - _EPOCH) // _MICROSECOND, dtype=np.int64)
    if isinstance(ts, np.datetime64):
        return np.full(n, ts.astype("datetime64[us]").astype(np.int64), dtype=np.int64)
    return _times(ts, n).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _listed(values: Any) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _layout(p: Pending) -> tuple[Any, ...]:
    """What calls must share to be merged: kind, logits width, cohort keys, and for labels
    whether they are class names (an Arrow column holds names or indices, not both)."""
    shape = p.values.shape[1:] if isinstance(p.values, np.ndarray) else ()
    named = p.kind == "labels" and isinstance(_listed(p.values[:1])[0], str)
    return p.kind, shape, tuple(sorted(p.cohort or {})), named


def merged(items: Sequence[Pending]) -> list[Pending]:
    """Contiguous calls of one layout (kind, logits width, cohort keys) as one call each, so
    that the Arrow conversion runs once per request rather than once per call."""
    out: list[Pending] = []
    start = 0
    while start < len(items):
        end = start + 1
        while end < len(items) and _layout(items[end]) == _layout(items[start]):
            end += 1
        group = items[start:end]
        start = end
        if len(group) == 1:
            out.append(group[0])
            continue
        first = group[0]
        ids = list(itertools.chain.from_iterable(_listed(p.ids) for p in group))
        if first.kind == "predictions":
            values: Any = np.concatenate([p.values for p in group])
        else:
            values = list(itertools.chain.from_iterable(_listed(p.values) for p in group))
        ts = Micros(np.concatenate([_micros(p.ts, p.n) for p in group]))
        cohort = {
            key: list(
                itertools.chain.from_iterable(
                    itertools.repeat(v, p.n) if isinstance(v, str) else _listed(v)
                    for p in group
                    for v in [(p.cohort or {})[key]]
                )
            )
            for key in first.cohort or {}
        }
        out.append(Pending(first.kind, len(ids), ids, values, ts, cohort or None))
    return out


def _times(ts: Any, n: int) -> pa.Array:
    if isinstance(ts, Micros):
        return pa.array(ts.values, TIMESTAMP)
    if isinstance(ts, datetime | np.datetime64):
        return pa.array(_micros(ts, n), TIMESTAMP)
    array = pa.array(ts)
    if pa.types.is_timestamp(array.type):
        if array.type.tz is None:
            array = array.cast(pa.timestamp(array.type.unit, "UTC"))
        return array.cast(TIMESTAMP, safe=False)
    raise ValueError(f"ts must hold datetimes or datetime64 values, got {array.type}")


def _cohort_columns(cohort: Mapping[str, Any] | None, n: int) -> dict[str, pa.Array]:
    columns = {}
    for key, value in sorted((cohort or {}).items()):
        columns[key] = pa.repeat(value, n) if isinstance(value, str) else _strings(value)
    return columns


def record_batch(p: Pending) -> pa.RecordBatch:
    """The Arrow record batch of one call's rows."""
    columns: dict[str, pa.Array] = {"id": _strings(p.ids)}
    if p.kind == "predictions":
        values = np.ascontiguousarray(p.values, dtype=np.float64)
        if values.ndim == 2:
            flat = pa.array(values.ravel())
            columns["logits"] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            columns["score"] = pa.array(values)
        columns["ts"] = _times(p.ts, p.n)
        columns.update(_cohort_columns(p.cohort, p.n))
    else:
        labels = p.values.tolist() if isinstance(p.values, np.ndarray) else list(p.values)
        columns["label"] = pa.array(labels)
        columns["ts"] = _times(p.ts, p.n)
    return pa.RecordBatch.from_pydict(columns)


def stream_bytes(batches: Sequence[pa.RecordBatch]) -> bytes:
    """Record batches of one schema as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue())


@functools.cache
def prepare() -> None:
    """Convert a sample of every column layout once, on the calling thread (once per process).

    pyarrow imports pandas (when it is installed) and ``pyarrow.compute`` on its first
    conversion. At interpreter exit, after the main thread has ended, that import fails: pandas
    imports ``concurrent.futures``, which refuses to register its exit hook once the interpreter
    is shutting down. A client prepares when it starts, so that the conversions of the rows it
    flushes at exit import nothing."""
    now = datetime.now(UTC)
    samples = [
        pending("predictions", ["a"], np.zeros((1, 2)), [now], {"k": ["v"]}),
        pending("predictions", np.array(["b"]), np.zeros((1, 2)), now, {"k": "v"}),
        pending("predictions", ["c"], [0.5], np.datetime64(0, "us"), None),
        pending("labels", ["a"], ["x"], None, None),
        pending("labels", ["a"], [1], None, None),
    ]
    for p in merged(samples):
        stream_bytes([record_batch(p)])
