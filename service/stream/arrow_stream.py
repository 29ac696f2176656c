"""An Arrow IPC stream body read into one table, or refused before it costs more than its size.

A body of ``application/vnd.apache.arrow.stream`` is exactly one IPC stream: a schema, record
batches (and the dictionary batches they refer to) and the end-of-stream marker, nothing after
it. Its messages are read without decoding them first: a schema of more than ``MAX_COLUMNS``
fields is refused from the field count its message declares, before any field is read, and
compressed buffers (their decompressed size escapes the body limit) before any is decompressed.
Then the record batches are decoded and fully validated, the batches' dictionaries of a column
unified into one, and dictionary-encoded strings held to decode to no more than the body limit.
``arrow_batches`` reads the table's columns as a batch.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

from service.common.errors import ErrorDetail, ValidationFailed
from service.stream.cohorts import MAX_KEYS

#: The media type of an Arrow IPC stream.
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: The most columns a body holds: ``id``, ``ts``, ``logits`` or ``score``, and one per cohort
#: key, of which a cohort has at most ``cohorts.MAX_KEYS`` (label bodies hold three).
MAX_COLUMNS = 3 + MAX_KEYS
#: The end-of-stream marker: a continuation marker and a zero length; the format before Arrow
#: 0.15 wrote the zero length alone.
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_LEGACY_END_OF_STREAM = b"\x00\x00\x00\x00"
#: The flatbuffer ``MessageHeader`` union's types of a schema, a dictionary and a record batch.
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
#: The longest part of a type's name a message quotes.
_TYPE_NAME_LENGTH = 80


class UnreadableArrow(Exception):
    """The body is not a complete, valid Arrow IPC stream (a 400 at the HTTP edge)."""


def refused(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(
        "the Arrow batch is invalid; nothing was written", [ErrorDetail(field, message)]
    )


def _unreadable(exc: Exception) -> UnreadableArrow:
    return UnreadableArrow(f"the body is not a readable Arrow IPC stream: {exc}")


def type_name(kind: pa.DataType) -> str:
    """``kind`` as a message shows it: at most ``_TYPE_NAME_LENGTH`` characters of its name."""
    name = str(kind)
    return name if len(name) <= _TYPE_NAME_LENGTH else name[:_TYPE_NAME_LENGTH] + "..."


def read_stream(raw: bytes, max_items: int, max_text_bytes: int) -> pa.Table:
    """The record batches of a body that is exactly one IPC stream, as one table (at least one
    row, at most ``max_items``), every buffer validated.

    ``UnreadableArrow`` for a truncated or malformed stream, one without its end-of-stream
    marker, or a body with bytes after that marker; ``ValidationFailed`` naming ``(body)`` for
    more than ``MAX_COLUMNS`` columns (refused from the schema message's field count, before
    any field is read), compressed buffers or a row count out of range, or naming the column of
    a repeated name, a dictionary of values other than strings and integers, a dictionary longer
    than its column, or dictionary-encoded strings that decode to more than ``max_text_bytes``
    bytes in all (a plain body cannot carry more text than its size).
    """
    buffer = pa.py_buffer(raw)
    _check_messages(buffer)
    batches: list[pa.RecordBatch] = []
    rows = 0
    try:
        reader = pa.ipc.open_stream(buffer)
        _check_schema(reader.schema)
        for batch in reader:
            if not batch.num_rows:
                continue
            rows += batch.num_rows
            if rows > max_items:
                raise refused("(body)", f"at most {max_items} rows per batch, got more")
            batch.validate(full=True)
            batches.append(batch)
        if rows == 0:
            raise refused("(body)", "expected at least one row")
        table = _one_chunk(pa.Table.from_batches(batches, schema=reader.schema))
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, ValidationFailed):
            raise
        raise _unreadable(exc) from None
    _check_dictionaries(table, max_text_bytes)
    return table


def _u32(meta: bytes, at: int) -> int:
    return int(struct.unpack_from("<I", meta, at)[0])


def _field(meta: bytes, table: int, index: int) -> int:
    """The offset of field ``index`` inside the flatbuffer table at ``table`` (0: absent)."""
    vtable = table - struct.unpack_from("<i", meta, table)[0]
    size = struct.unpack_from("<H", meta, vtable)[0]
    entry = 4 + 2 * index
    return 0 if entry >= size else int(struct.unpack_from("<H", meta, vtable + entry)[0])


def _table_at(meta: bytes, table: int, index: int) -> int | None:
    """The flatbuffer table (or vector) field ``index`` of ``table`` points to, if present."""
    at = _field(meta, table, index)
    return None if not at else table + at + _u32(meta, table + at)


def _header(meta: bytes) -> tuple[int, int | None]:
    """An IPC message's metadata (a flatbuffer ``Message``): its header's union type and the
    header's table."""
    root = _u32(meta, 0)
    kind_at = _field(meta, root, 1)
    return (meta[root + kind_at] if kind_at else 0), _table_at(meta, root, 2)


def _field_count(meta: bytes) -> int:
    """The number of top-level fields a ``Schema`` message declares (its ``fields`` vector's
    length, read without reading a field)."""
    kind, schema = _header(meta)
    if kind != _SCHEMA or schema is None:
        return 0
    fields = _table_at(meta, schema, 1)
    return 0 if fields is None else _u32(meta, fields)


def _is_compressed(meta: bytes) -> bool:
    """Whether a message declares compressed body buffers: its header, a ``RecordBatch`` or a
    ``DictionaryBatch`` holding one, carries the ``compression`` field (index 3)."""
    kind, table = _header(meta)
    if kind not in (_DICTIONARY_BATCH, _RECORD_BATCH) or table is None:
        return False
    if kind == _DICTIONARY_BATCH:
        table = _table_at(meta, table, 1)
        if table is None:
            return False
    return _field(meta, table, 3) != 0


def _check_messages(buffer: pa.Buffer) -> None:
    """Read the stream's messages without decoding them. Refuse a schema of more than
    ``MAX_COLUMNS`` fields as soon as it is read, and compressed body buffers before anything
    is decoded (their decompressed size is not bounded by the body limit: a small body could
    expand to gigabytes); refuse a stream without its end-of-stream marker, and any byte after
    it: a body is exactly one stream."""
    source = pa.BufferReader(buffer)
    first = True
    end_of_messages = 0
    try:
        for message in pa.ipc.MessageReader.open_stream(source):
            meta = message.metadata.to_pybytes()
            if first and (count := _field_count(meta)) > MAX_COLUMNS:
                raise refused(
                    "(body)",
                    f"at most {MAX_COLUMNS} columns (id, ts, logits or score and {MAX_KEYS} cohort"
                    f" keys), the schema has {count}",
                )
            first = False
            if _is_compressed(meta):
                raise refused(
                    "(body)",
                    "compressed Arrow buffers are not accepted: send the stream uncompressed",
                )
            end_of_messages = source.tell()
    except (pa.ArrowException, OSError, struct.error, IndexError) as exc:
        raise _unreadable(exc) from None
    end = source.tell()
    if buffer[end_of_messages:end].to_pybytes() not in (_END_OF_STREAM, _LEGACY_END_OF_STREAM):
        raise UnreadableArrow("the Arrow stream does not end with its end-of-stream marker")
    if end < buffer.size:
        raise UnreadableArrow(
            f"the body goes on after the Arrow stream's end-of-stream marker, from byte offset"
            f" {end}: a body is exactly one IPC stream"
        )


def _check_schema(schema: pa.Schema) -> None:
    """Refuse a repeated column name, and a dictionary-encoded column of values other than
    strings and integers (no column takes them, and decoding them is not bounded)."""
    seen: set[str] = set()
    for name, kind in zip(schema.names, schema.types, strict=True):
        if name in seen:
            raise refused(name, "the column appears more than once")
        seen.add(name)
        if pa.types.is_dictionary(kind) and not (
            is_text(kind.value_type) or pa.types.is_integer(kind.value_type)
        ):
            raise refused(
                name,
                f"dictionary-encoded columns hold strings or integers, got {type_name(kind)}",
            )


def is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _one_chunk(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column: the record batches' dictionaries of a column
    unified into one (indexed by int32, which any union of a body's dictionaries fits)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type) and table.column(i).num_chunks > 1:
            wide = pa.dictionary(pa.int32(), field.type.value_type)
            table = table.set_column(i, field.name, table.column(i).cast(wide))
    return table.combine_chunks()


def _check_dictionaries(table: pa.Table, max_text_bytes: int) -> None:
    """Refuse a dictionary-encoded column whose dictionary holds more values than the column
    has rows (none is needed; a large one only costs memory), and dictionary-encoded strings
    that decode to more than ``max_text_bytes`` bytes in all."""
    decoded = 0
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not pa.types.is_dictionary(column.type):
            continue
        array = column.chunk(0)
        if len(array.dictionary) > len(array):
            raise refused(
                name, f"the dictionary holds {len(array.dictionary)} values for {len(array)} rows"
            )
        if is_text(array.type.value_type):
            lengths = pc.binary_length(array.dictionary)
            decoded += pc.sum(pc.take(lengths, array.indices)).as_py() or 0
    if decoded > max_text_bytes:
        raise refused(
            "(body)", f"the dictionary-encoded strings decode to more than {max_text_bytes} bytes"
        )
