"""The column-built binary COPY payload, read back by PostgreSQL value for value."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.db import binary_copy
from service.db.database import Database
from tests.integration.conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "postgresql", reason="COPY's binary format is PostgreSQL's"
)

#: Text PostgreSQL stores: any code point but NUL and the lone surrogates UTF-8 cannot encode.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
STAMP = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


def rows_strategy() -> st.SearchStrategy[list[tuple[str, datetime, str, list[float]]]]:
    row = st.tuples(
        TEXT,
        STAMP,
        st.sampled_from(["{}", '{"region":"emea"}', '{"k":"\u00e9\u2603"}']),
        st.lists(st.floats(allow_nan=False, width=64), min_size=3, max_size=3),
    )
    return st.lists(row, max_size=40)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=rows_strategy())
def test_a_payload_round_trips_through_postgresql(
    db: Database, rows: list[tuple[str, datetime, str, list[float]]]
) -> None:
    n = len(rows)
    ids = [r[0] for r in rows]
    stamps = [r[1] for r in rows]
    cohorts = [r[2] for r in rows]
    inputs = np.array([r[3] for r in rows], dtype="<f8").reshape(n, 3)
    now = datetime(2026, 12, 2, 3, 4, 5, 678901, tzinfo=UTC)
    data = binary_copy.payload(
        [
            binary_copy.constant("m\u00e9".encode(), n),
            binary_copy.texts(pa.array(ids, pa.string())),
            binary_copy.timestamps(pa.array(stamps, pa.timestamp("us", "UTC"))),
            binary_copy.texts(pa.array(cohorts, pa.string())),
            binary_copy.fixed(inputs),
            binary_copy.timestamp(now, n),
        ]
    )
    with db.engine.connect() as connection:
        driver = connection.connection.dbapi_connection
        with driver.cursor() as cursor:
            cursor.execute(
                "CREATE TEMP TABLE copied (n serial, model text, id text, ts timestamptz,"
                " cohort json, inputs bytea, received_at timestamptz)"
            )
            with cursor.copy(
                "COPY copied (model, id, ts, cohort, inputs, received_at) FROM STDIN"
                " (FORMAT BINARY)"
            ) as copy:
                copy.write(data)
            cursor.execute(
                "SELECT model, id, ts, cohort::text, inputs, received_at FROM copied ORDER BY n"
            )
            back = cursor.fetchall()
        driver.rollback()
    assert back == [
        ("m\u00e9", ids[i], stamps[i], cohorts[i], inputs[i].tobytes(), now) for i in range(n)
    ]
