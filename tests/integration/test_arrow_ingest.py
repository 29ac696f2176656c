"""Prediction and label batches as Apache Arrow IPC streams: stored exactly as the same batch in
JSON, and every malformed stream refused with a 4xx naming the column, nothing stored (both
backends)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from flask.testing import FlaskClient
from sqlalchemy import event

from service.db.database import READ_ONLY, Database
from service.stream.arrow_stream import MAX_COLUMNS
from service.stream.cohorts import MAX_KEYS
from tests.integration.conftest import BACKEND, Auth, assert_envelope
from tests.integration.test_stream import (
    _multiclass_contract,
    ok,
    reading,
    register_binary,
    seed_rows,
)

ARROW = "application/vnd.apache.arrow.stream"
K = 3


def encode(
    table: pa.Table | pa.RecordBatch, compression: str | None = None, legacy: bool = False
) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression, use_legacy_format=legacy)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write(table)
    return sink.getvalue().to_pybytes()


def send(
    client: FlaskClient, auth: Auth, path: str, body: bytes, query: str = "model=glyphs"
) -> Any:
    return client.post(
        f"{path}?{query}",
        data=body,
        headers={**auth.headers("ingest"), "Content-Type": ARROW},
    )


def _times(n: int) -> list[datetime]:
    now = datetime.now(UTC).replace(microsecond=0)
    return [now - timedelta(minutes=5 + i) for i in range(n)]


def prediction_table(n: int = 40, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    logits = np.round(rng.normal(size=(n, K)) * 2, 6)
    return pa.table(
        {
            "id": [f"a{i}" for i in range(n)],
            "ts": pa.array(_times(n), pa.timestamp("us", "UTC")),
            "logits": pa.FixedSizeListArray.from_arrays(pa.array(logits.ravel()), K),
            "region": pa.array(["emea" if i % 2 else "apac" for i in range(n)]).dictionary_encode(),
        }
    )


def _as_json(table: pa.Table) -> dict[str, Any]:
    rows = table.to_pylist()
    return {
        "model": "glyphs",
        "predictions": [
            {
                "id": r["id"],
                "ts": r["ts"].isoformat().replace("+00:00", "Z"),
                "cohort": {"region": r["region"]},
                "logits": r["logits"],
            }
            for r in rows
        ],
    }


def _stored(client: FlaskClient, auth: Auth) -> int:
    slices = ok(client.get("/v1/models/glyphs/cohorts", headers=auth.headers()))["slices"]
    return sum(s["n_predictions"] for s in slices if s["cohort"] == "all")


def test_an_arrow_batch_is_stored_as_the_same_json_batch(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    table = prediction_table()
    first = ok(send(client, auth, "/v1/predictions", encode(table)))
    assert first["accepted"] == 40 and first["duplicates"] == 0
    again = ok(send(client, auth, "/v1/predictions", encode(table)))
    assert again == {**first, "accepted": 0, "duplicates": 40}
    # The same rows as JSON are duplicates: identical ids, times, cohorts and stored bytes.
    as_json = ok(
        client.post("/v1/predictions", json=_as_json(table), headers=auth.headers("ingest"))
    )
    assert as_json["accepted"] == 0 and as_json["duplicates"] == 40
    slices = ok(client.get("/v1/models/glyphs/cohorts", headers=auth.headers()))["slices"]
    assert {s["cohort"]: s["n_predictions"] for s in slices} == {
        "all": 40,
        "region=apac": 20,
        "region=emea": 20,
    }

    labels = pa.table(
        {
            "id": [f"a{i}" for i in range(30)] + ["later"],
            "label": pa.array([i % K for i in range(30)] + [1], pa.int32()),
            "ts": pa.array(_times(31), pa.timestamp("ms", "UTC")),
        }
    )
    applied = ok(send(client, auth, "/v1/labels", encode(labels)))
    assert applied["joined"] == 30 and applied["pending"] == 1
    assert reading(client, auth, "glyphs")["n_labeled"] == 30
    names = pa.table(
        {
            "id": ["a0", "a1"],
            "label": pa.array(["a", "c"]).dictionary_encode(),
            "ts": [t.isoformat() for t in _times(2)],
        }
    )
    repeated = ok(send(client, auth, "/v1/labels", encode(names)))
    assert repeated["duplicates"] == 1 and len(repeated["conflicts"]) == 1


def test_a_binary_contract_takes_a_score_column(client: FlaskClient, auth: Auth) -> None:
    register_binary(
        client, auth, "fraud", {"method": "identity"}, seed_rows("validation"), seed_rows("test")
    )
    table = pa.table(
        {
            "id": ["s1", "s2", "s3"],
            "ts": pa.array(_times(3), pa.timestamp("s", "Europe/Istanbul")),
            "score": pa.array([0.1, 0.5, 0.9], pa.float32()),
        }
    )
    assert ok(send(client, auth, "/v1/predictions", encode(table), "model=fraud"))["accepted"] == 3
    bad = table.set_column(2, "score", pa.array([0.1, 1.5, 0.9]))
    error = assert_envelope(send(client, auth, "/v1/predictions", encode(bad), "model=fraud"), 422)
    assert [d["field"] for d in error["details"]] == ["predictions[1].score"]


def _replace(name: str, column: pa.Array) -> Callable[[pa.Table], bytes]:
    def build(table: pa.Table) -> bytes:
        return encode(table.set_column(table.column_names.index(name), name, column))

    return build


def _drop(name: str) -> Callable[[pa.Table], bytes]:
    return lambda table: encode(table.drop_columns([name]))


def _ragged(table: pa.Table) -> bytes:
    rows = [list(r) for r in table.column("logits").to_pylist()]
    rows[1] = rows[1][:2]
    return _replace("logits", pa.array(rows, pa.list_(pa.float64())))(table)


def _huge_dictionary(table: pa.Table) -> bytes:
    dictionary = pa.array([f"r{i}" for i in range(5_000)])
    indices = pa.array([i % 2 for i in range(table.num_rows)], pa.int32())
    return _replace("region", pa.DictionaryArray.from_arrays(indices, dictionary))(table)


def _nan_logits(table: pa.Table) -> bytes:
    values = np.zeros(table.num_rows * K)
    values[7] = np.nan
    return _replace("logits", pa.FixedSizeListArray.from_arrays(pa.array(values), K))(table)


def _text_ts(value: str) -> Callable[[pa.Table], bytes]:
    return lambda table: _replace("ts", pa.array([value] * table.num_rows))(table)


MALFORMED: dict[str, tuple[Callable[[pa.Table], bytes], int, list[str]]] = {
    "id of integers": (_replace("id", pa.array(range(40))), 422, ["id"]),
    "missing ts": (_drop("ts"), 422, ["ts"]),
    "missing logits": (_drop("logits"), 422, ["logits"]),
    "times without a zone": (_replace("ts", pa.array(_times(40), pa.timestamp("us"))), 422, ["ts"]),
    "times of another type": (_replace("ts", pa.array([1.5] * 40)), 422, ["ts"]),
    "logits of strings": (
        _replace("logits", pa.array([["1", "2", "3"]] * 40, pa.list_(pa.string()))),
        422,
        ["logits"],
    ),
    "logits of the wrong width": (
        _replace("logits", pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(80)), 2)),
        422,
        ["logits"],
    ),
    "ragged logits": (_ragged, 422, ["predictions[1].logits"]),
    "a NaN logit": (_nan_logits, 422, ["predictions[2].logits"]),
    "a cohort of integers": (_replace("region", pa.array(range(40))), 422, ["region"]),
    "a huge dictionary": (_huge_dictionary, 422, ["region"]),
    "a time before 2000": (_text_ts("1999-01-01T00:00:00Z"), 422, ["predictions[0].ts"]),
    "an empty id": (
        _replace("id", pa.array([""] + [f"x{i}" for i in range(39)])),
        422,
        ["predictions[0].id"],
    ),
    "a null id": (
        _replace("id", pa.array([None] + [f"x{i}" for i in range(39)], pa.string())),
        422,
        ["predictions[0].id"],
    ),
    "truncated in a batch": (lambda t: encode(t)[:-100], 400, ["(body)"]),
    "truncated at a batch end": (lambda t: encode(t)[:-8], 400, ["(body)"]),
    "not Arrow at all": (lambda t: b'{"model": "glyphs"}', 400, ["(body)"]),
    "no rows": (lambda t: encode(t.slice(0, 0)), 422, ["(body)"]),
    "compressed buffers": (lambda t: encode(t, "zstd"), 422, ["(body)"]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_arrow_is_refused_naming_the_column(
    client: FlaskClient, auth: Auth, case: str
) -> None:
    _multiclass_contract(client, auth)
    build, status, fields = MALFORMED[case]
    error = assert_envelope(
        send(client, auth, "/v1/predictions", build(prediction_table())), status
    )
    assert [d["field"] for d in error["details"]][: len(fields)] == fields, error
    assert _stored(client, auth) == 0


def test_the_envelope_comes_from_the_query(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    body = encode(prediction_table())
    for query, field in (("", "model"), ("model=glyphs&colour=red", "colour")):
        error = assert_envelope(send(client, auth, "/v1/predictions", body, query), 422)
        assert [d["field"] for d in error["details"]] == [field]
    assert send(client, auth, "/v1/predictions", body, "model=nobody").status_code == 404
    assert _stored(client, auth) == 0


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        ({"label": pa.array([0.5, 1.0])}, "label"),
        ({"note": pa.array(["x", "y"])}, "note"),
        ({"label": pa.array([0, 9])}, "labels[1].label"),
    ],
)
def test_malformed_label_columns_are_refused(
    client: FlaskClient, auth: Auth, columns: dict[str, pa.Array], field: str
) -> None:
    _multiclass_contract(client, auth)
    base = {
        "id": pa.array(["a0", "a1"]),
        "label": pa.array([0, 1]),
        "ts": pa.array(_times(2), pa.timestamp("us", "UTC")),
    }
    error = assert_envelope(send(client, auth, "/v1/labels", encode(pa.table(base | columns))), 422)
    assert [d["field"] for d in error["details"]] == [field]
    assert reading(client, auth, "glyphs")["n_labeled"] == 0


def label_table(n: int = 40) -> pa.Table:
    return pa.table(
        {
            "id": [f"a{i}" for i in range(n)],
            "label": pa.array([i % K for i in range(n)], pa.int32()),
            "ts": pa.array(_times(n), pa.timestamp("us", "UTC")),
        }
    )


#: Per route: its table of 40 rows, and the reply's count of rows new to the database.
ROUTES: dict[str, tuple[Callable[[], pa.Table], Callable[[dict[str, Any]], int]]] = {
    "/v1/predictions": (prediction_table, lambda reply: reply["accepted"]),
    "/v1/labels": (label_table, lambda reply: reply["pending"] + reply["joined"]),
}
AFTER_THE_STREAM: dict[str, Callable[[pa.Table], bytes]] = {
    "a second stream": encode,
    "one byte": lambda rest: b"\x00",
    "an end-of-stream marker": lambda rest: b"\xff\xff\xff\xff\x00\x00\x00\x00",
}


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("after", list(AFTER_THE_STREAM))
@pytest.mark.parametrize("legacy", [False, True], ids=["stream", "pre-0.15 stream"])
def test_a_body_is_exactly_one_stream(
    client: FlaskClient, auth: Auth, path: str, after: str, legacy: bool
) -> None:
    _multiclass_contract(client, auth)
    build, new_rows = ROUTES[path]
    table = build()
    first = encode(table.slice(0, 15), legacy=legacy)
    body = first + AFTER_THE_STREAM[after](table.slice(15))
    error = assert_envelope(send(client, auth, path, body), 400)
    assert [d["field"] for d in error["details"]] == ["(body)"]
    assert f"from byte offset {len(first)}:" in error["message"], error
    # Nothing of the refused body was stored: every row of the table is new.
    assert new_rows(ok(send(client, auth, path, encode(table)))) == 40


def test_a_stream_in_the_format_before_arrow_0_15_is_taken(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    body = encode(prediction_table(), legacy=True)
    assert body.endswith(b"\x00\x00\x00\x00") and not body.endswith(b"\xff" * 4 + b"\x00" * 4)
    assert ok(send(client, auth, "/v1/predictions", body))["accepted"] == 40


def _cohort_keys(table: pa.Table, keys: int) -> pa.Table:
    """``table`` with ``keys`` cohort key columns for ``region``, each row holding one key."""
    table = table.drop_columns(["region"])
    values = [
        pa.array([f"v{i}" if i % keys == key else None for i in range(table.num_rows)], pa.string())
        for key in range(keys)
    ]
    names = [*table.column_names, *(f"k{key}" for key in range(keys))]
    return pa.Table.from_arrays([*table.columns, *values], names)


def test_a_body_of_one_column_per_cohort_key_is_taken(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    table = _cohort_keys(prediction_table(), MAX_KEYS)
    assert table.num_columns == MAX_COLUMNS
    assert ok(send(client, auth, "/v1/predictions", encode(table)))["accepted"] == 40


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("columns", [MAX_COLUMNS + 1, 20_000])
def test_more_columns_than_a_body_holds_are_refused_from_the_schema(
    client: FlaskClient, auth: Auth, path: str, columns: int
) -> None:
    _multiclass_contract(client, auth)
    build, new_rows = ROUTES[path]
    table = build()
    if path == "/v1/predictions":
        wide = _cohort_keys(table, columns - 3)
    else:
        extra = pa.array([None] * table.num_rows, pa.string())
        names = [f"k{i}" for i in range(columns - 3)]
        wide = pa.Table.from_arrays(
            [*table.columns, *[extra] * len(names)], [*table.column_names, *names]
        )
    error = assert_envelope(send(client, auth, path, encode(wide)), 422)
    assert error["details"] == [
        {
            "field": "(body)",
            "message": f"at most {MAX_COLUMNS} columns (id, ts, logits or score and {MAX_KEYS}"
            f" cohort keys), the schema has {columns}",
        }
    ]
    assert new_rows(ok(send(client, auth, path, encode(table)))) == 40


def test_a_repeated_column_name_is_refused_naming_it(client: FlaskClient, auth: Auth) -> None:
    _multiclass_contract(client, auth)
    table = prediction_table()
    twice = table.append_column("region", table.column("region"))
    error = assert_envelope(send(client, auth, "/v1/predictions", encode(twice)), 422)
    assert [(d["field"], d["message"]) for d in error["details"]] == [
        ("region", "the column appears more than once")
    ]


def test_dictionary_strings_decode_to_no_more_than_the_body_limit(
    client: FlaskClient, auth: Auth
) -> None:
    _multiclass_contract(client, auth)
    table = prediction_table()
    long_value = pa.array(["x" * 500_000])
    indices = pa.array([0] * table.num_rows, pa.int32())
    region = pa.DictionaryArray.from_arrays(indices, long_value)
    body = encode(table.set_column(3, "region", region))
    assert len(body) < 1_000_000
    error = assert_envelope(send(client, auth, "/v1/predictions", body), 422)
    assert [d["field"] for d in error["details"]] == ["(body)"]
    assert "decode to more than 16777216 bytes" in error["details"][0]["message"]


def test_a_column_of_a_long_type_is_named_in_a_short_message(
    client: FlaskClient, auth: Auth
) -> None:
    _multiclass_contract(client, auth)
    table = prediction_table()
    fields = [pa.array(range(table.num_rows), pa.int8())] * 2_000
    region = pa.StructArray.from_arrays(fields, [f"field{i}" for i in range(len(fields))])
    body = encode(table.set_column(3, "region", region))
    error = assert_envelope(send(client, auth, "/v1/predictions", body), 422)
    [detail] = error["details"]
    assert detail["field"] == "region" and len(detail["message"]) < 200, detail


@contextmanager
def transactions(db: Database) -> Iterator[list[bool]]:
    """Record every transaction begun on ``db`` meanwhile: True for a read session's (on SQLite
    a deferred ``BEGIN``), False for any other (on SQLite ``BEGIN IMMEDIATE``, the write
    lock)."""
    began: list[bool] = []

    def record(connection: Any) -> None:
        began.append(bool(connection.get_execution_options().get(READ_ONLY)))

    event.listen(db.engine, "begin", record)
    try:
        yield began
    finally:
        event.remove(db.engine, "begin", record)


def _out_of_range_labels() -> bytes:
    table = label_table()
    return encode(table.set_column(1, "label", pa.array([K] * table.num_rows, pa.int32())))


REFUSED: dict[str, tuple[str, Callable[[], bytes], int, str]] = {
    "two streams": (
        "/v1/predictions",
        lambda: encode(prediction_table(20)) + encode(prediction_table(20)),
        400,
        "(body)",
    ),
    "too many columns": (
        "/v1/predictions",
        lambda: encode(_cohort_keys(prediction_table(), 40)),
        422,
        "(body)",
    ),
    "a NaN logit": (
        "/v1/predictions",
        lambda: _nan_logits(prediction_table()),
        422,
        "predictions[2].logits",
    ),
    "a class index past K": ("/v1/labels", _out_of_range_labels, 422, "labels[0].label"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_arrow_body_begins_no_write_transaction(
    client: FlaskClient, auth: Auth, db: Database, case: str
) -> None:
    """The body is read and its rows validated before the request begins a write transaction
    (on SQLite: before it takes the write lock), its stored token resolved in a read session."""
    _multiclass_contract(client, auth)
    path, build, status, field = REFUSED[case]
    body = build()
    auth.token("ingest")
    with transactions(db) as began:
        error = assert_envelope(send(client, auth, path, body), status)
    assert error["details"][0]["field"] == field
    assert began and all(began), began


@pytest.mark.parametrize("path", list(ROUTES))
def test_an_accepted_arrow_body_writes_in_one_transaction_after_reading(
    client: FlaskClient, auth: Auth, db: Database, path: str
) -> None:
    _multiclass_contract(client, auth)
    build, new_rows = ROUTES[path]
    body = encode(build())
    auth.token("ingest")
    with transactions(db) as began:
        assert new_rows(ok(send(client, auth, path, body))) == 40
    assert began[-1] is False and began.count(False) == 1, began


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_json_batch_is_read_and_refused_as_an_arrow_one_is(
    client: FlaskClient, auth: Auth, db: Database, path: str
) -> None:
    """One body reader for both content types: a JSON batch's rows too are validated in a read
    session before any write transaction begins, and an accepted one writes in one."""
    _multiclass_contract(client, auth)
    items_key = path.removeprefix("/v1/")
    table = ROUTES[path][0]().to_pylist()
    items = [
        {
            **{k: v for k, v in row.items() if k != "region"},
            "ts": row["ts"].isoformat().replace("+00:00", "Z"),
        }
        for row in table
    ]
    auth.token("ingest")
    refused = [*items[:2], {**items[2], "id": ""}]
    with transactions(db) as began:
        error = assert_envelope(
            client.post(
                path,
                json={"model": "glyphs", items_key: refused},
                headers=auth.headers("ingest"),
            ),
            422,
        )
    assert error["details"][0]["field"] == f"{items_key}[2].id"
    assert began and all(began), began
    with transactions(db) as began:
        ok(
            client.post(
                path, json={"model": "glyphs", items_key: items}, headers=auth.headers("ingest")
            )
        )
    assert began[-1] is False and began.count(False) == 1, began


@pytest.mark.skipif(BACKEND != "sqlite", reason="SQLite's database-wide write lock")
def test_a_refused_body_is_answered_while_another_writer_holds_the_lock(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    """Without waiting for the write lock: before the request would wait out the busy timeout
    and get a 503."""
    _multiclass_contract(client, auth)
    auth.token("ingest")
    path, build, status, field = REFUSED["a NaN logit"]
    with db.engine.connect() as writer:
        writer.exec_driver_sql("SELECT 1")
        assert writer.in_transaction()
        error = assert_envelope(send(client, auth, path, build()), status)
        writer.rollback()
    assert error["details"][0]["field"] == field
