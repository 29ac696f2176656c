"""The column-built binary COPY payload's pieces (the round trip through PostgreSQL is an
integration test)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from service.db import binary_copy


def test_a_sliced_text_array_gives_its_own_rows() -> None:
    values = pa.array(["zero", "one", "two", "three"], pa.string()).slice(1, 2)
    field = binary_copy.texts(values)
    assert field.data.tobytes() == b"onetwo"
    assert field.lengths.tolist() == [3, 3]


def test_a_null_is_refused() -> None:
    with pytest.raises(ValueError, match="no nulls"):
        binary_copy.texts(pa.array(["a", None], pa.string()))
    with pytest.raises(ValueError, match="no nulls"):
        binary_copy.timestamps(pa.array([None], pa.timestamp("us", "UTC")))


def test_an_empty_payload_is_the_signature_and_the_trailer() -> None:
    empty = binary_copy.payload([binary_copy.constant(b"m", 0)])
    assert empty == binary_copy.SIGNATURE + binary_copy.TRAILER
