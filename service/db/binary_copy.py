"""PostgreSQL's binary ``COPY`` format, built column by column with numpy.

A payload is the signature, then per row a 16-bit field count and per field a 32-bit byte length
followed by that many bytes, then the trailer; every integer is big-endian. Building it from
columns costs a few array operations per field, whatever the number of rows, where a row-by-row
writer pays for a Python tuple and a dumper call per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
TRAILER = b"\xff\xff"

#: PostgreSQL counts timestamps in microseconds from 2000-01-01 UTC.
_PG_EPOCH = np.datetime64("2000-01-01T00:00:00", "us")


@dataclass(frozen=True)
class Field:
    """One field of every row: ``data`` (uint8) the rows' bytes back to back, ``lengths`` (N,)
    each row's byte count."""

    data: np.ndarray
    lengths: np.ndarray


def fixed(values: np.ndarray) -> Field:
    """Rows of equal width: ``values`` (N, W) uint8, or any (N, ...) array taken as its bytes
    in memory order (the caller chooses the byte order)."""
    contiguous = np.ascontiguousarray(values)
    width = contiguous.itemsize * int(np.prod(contiguous.shape[1:], dtype=np.int64))
    data = contiguous.reshape(-1).view(np.uint8)
    return Field(data, np.full(len(contiguous), width, dtype=np.int64))


def constant(value: bytes, n: int) -> Field:
    """The same bytes in each of ``n`` rows."""
    row = np.frombuffer(value, dtype=np.uint8)
    return Field(np.tile(row, n), np.full(n, len(row), dtype=np.int64))


def texts(values: pa.Array) -> Field:
    """UTF-8 text (``text``, ``varchar``, and ``json``, whose binary form is its text), one
    string per row; ``values`` a pyarrow string array without nulls."""
    if values.null_count:
        raise ValueError("a text field of a COPY payload holds no nulls")
    values = values.cast(pa.large_string())
    first = values.offset
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[first : first + len(values) + 1]
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    return Field(data, np.diff(offsets))


def timestamps(values: pa.Array) -> Field:
    """``timestamptz`` from a pyarrow timestamp array in microseconds, without nulls."""
    if values.null_count:
        raise ValueError("a timestamp field of a COPY payload holds no nulls")
    micros = values.cast(pa.int64()).to_numpy()
    return fixed((micros - _PG_EPOCH.astype(np.int64)).astype(">i8"))


def timestamp(value: datetime, n: int) -> Field:
    """``timestamptz``: the same aware ``value`` in each of ``n`` rows."""
    since = (value - datetime(2000, 1, 1, tzinfo=value.tzinfo)) // timedelta(microseconds=1)
    return constant(since.to_bytes(8, "big", signed=True), n)


def payload(fields: Sequence[Field]) -> bytes:
    """The whole ``COPY ... FROM STDIN (FORMAT BINARY)`` input of the rows ``fields`` describe
    (each field's N rows in the same order)."""
    n = len(fields[0].lengths)
    if not n:
        return SIGNATURE + TRAILER
    lengths = np.stack([f.lengths for f in fields], axis=1)
    sizes = 2 + (4 + lengths).sum(axis=1)
    starts = len(SIGNATURE) + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    out = np.empty(len(SIGNATURE) + int(sizes.sum()) + len(TRAILER), dtype=np.uint8)
    out[: len(SIGNATURE)] = np.frombuffer(SIGNATURE, dtype=np.uint8)
    out[len(out) - len(TRAILER) :] = np.frombuffer(TRAILER, dtype=np.uint8)
    count = np.frombuffer(len(fields).to_bytes(2, "big"), dtype=np.uint8)
    out[starts[:, None] + np.arange(2)] = count
    at = starts + 2
    for field in fields:
        width = np.frombuffer(field.lengths.astype(">i4").tobytes(), dtype=np.uint8)
        out[at[:, None] + np.arange(4)] = width.reshape(n, 4)
        _place(out, at + 4, field)
        at = at + 4 + field.lengths
    return out.tobytes()


def _place(out: np.ndarray, at: np.ndarray, field: Field) -> None:
    """Copy each row's bytes of ``field`` to ``out`` from its offset in ``at``."""
    if len(field.lengths) == 0:
        return
    width = int(field.lengths[0])
    if (field.lengths == width).all():
        out[at[:, None] + np.arange(width)] = field.data.reshape(len(at), width)
        return
    firsts = np.concatenate(([0], np.cumsum(field.lengths)[:-1]))
    out[np.repeat(at - firsts, field.lengths) + np.arange(len(field.data))] = field.data
