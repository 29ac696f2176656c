"""A batch of labels queued for the fold comes back from its stored payload value for value."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from service.stream.fold_store import BATCH_SCHEMA, decode_batches, encode_batch
from service.stream.sql.columns import LabeledRows

#: Stored text: valid Unicode without NUL, as the label and prediction validation admits.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))

ROW = st.tuples(
    TEXT,
    TEXT,
    st.integers(-(2**62), 2**62),
    TEXT,
    st.binary(max_size=200),
    st.integers(0, 2**15 - 1),
)


def queued(rows: list[tuple[str, str, int, str, bytes, int]]) -> LabeledRows:
    return LabeledRows.of_rows([(*row, None) for row in rows])


def as_rows(batch: LabeledRows) -> list[tuple[object, ...]]:
    return list(
        zip(
            batch.ids,
            batch.contract_ids,
            batch.seconds.tolist(),
            batch.slices,
            batch.inputs,
            batch.labels.tolist(),
            strict=True,
        )
    )


# The first example took over a second on a loaded machine, the next ones under a millisecond.
@settings(deadline=None)
@given(st.lists(st.lists(ROW, max_size=20), max_size=4))
def test_batches_decode_to_what_was_queued_in_order(batches: list[list[tuple]]) -> None:
    decoded = decode_batches([encode_batch(queued(rows)) for rows in batches])
    assert as_rows(decoded) == [row for rows in batches for row in rows]
    assert len(decoded) == sum(len(rows) for rows in batches)
    assert decoded.seconds.dtype == np.int64 and decoded.labels.dtype == np.int64


def test_a_payload_is_one_arrow_stream_of_the_batch_schema() -> None:
    payload = encode_batch(queued([("p1", "c1", 7, '["all"]', b"\x00\x01", 3)]))
    table = pa.ipc.open_stream(payload).read_all()
    assert table.schema == BATCH_SCHEMA
    assert table.column("label").to_pylist() == [3]


def test_no_payload_decodes_to_no_labels() -> None:
    empty = decode_batches([])
    assert len(empty) == 0 and empty.seconds.size == 0 and empty.labels.size == 0
