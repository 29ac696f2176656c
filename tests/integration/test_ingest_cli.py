"""``calmon ingest``: CSV, Parquet and Arrow files sent through the client to a real served
calmon, a rerun after an interruption counting every prediction once (both backends)."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from service.cli import main
from service.client import Calmon
from service.client.backfill import ingest_file
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body
from tests.integration.test_served import serving_fresh

K = 3


def _table(first: int, n: int) -> pa.Table:
    rng = np.random.default_rng(first)
    now = datetime.now(UTC).replace(microsecond=0)
    logits = np.round(rng.normal(size=(n, K)) * 2, 6)
    return pa.table(
        {
            "id": [f"f{i}" for i in range(first, first + n)],
            "ts": pa.array(
                [now - timedelta(minutes=10 + i % 600) for i in range(n)],
                pa.timestamp("us", "UTC"),
            ),
            "logits": pa.FixedSizeListArray.from_arrays(pa.array(logits.ravel()), K),
            "region": ["emea" if i % 3 else "apac" for i in range(n)],
        }
    )


def _csv(table: pa.Table, path: Path) -> Path:
    text = table.set_column(
        2, "logits", pa.array([json.dumps(r) for r in table.column("logits").to_pylist()])
    )
    text = text.set_column(
        1, "ts", pa.array([t.isoformat() for t in table.column("ts").to_pylist()])
    )
    pa_csv.write_csv(text, path)
    return path


def _arrow(table: pa.Table, path: Path) -> Path:
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=700)
    return path


def _ingest(
    url: str, kind: str, path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    options = ["--url", url, "--token", ADMIN_TOKEN, "--model", "glyphs", "--batch", "1000"]
    code = main(["ingest", kind, str(path), *options])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_files_of_each_format_are_ingested_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving_fresh(tmp_path) as server:
        client = Calmon(server.url, ADMIN_TOKEN, model="glyphs")
        client.fit(fit_body("glyphs"))
        csv_file = _csv(_table(0, 2_500), tmp_path / "p.csv")
        whole = _table(10_000, 3_000)
        parquet_file = tmp_path / "p.parquet"
        pq.write_table(whole, parquet_file, row_group_size=1_000)
        arrow_file = _arrow(_table(20_000, 1_500), tmp_path / "p.arrow")

        for path, n in ((csv_file, 2_500), (arrow_file, 1_500)):
            code, out, err = _ingest(server.url, "predictions", path, capsys)
            assert code == 0, err
            assert f"{n:,} of {n:,} rows acknowledged: {n:,} new predictions, 0 already" in out

        # An interrupted run stored the first 1,200 rows; the rerun sends the whole file.
        pq.write_table(whole.slice(0, 1_200), tmp_path / "cut.parquet")
        assert _ingest(server.url, "predictions", tmp_path / "cut.parquet", capsys)[0] == 0
        code, out, err = _ingest(server.url, "predictions", parquet_file, capsys)
        assert code == 0, err
        assert "3,000 of 3,000 rows acknowledged: 1,800 new predictions, 1,200 already" in out
        assert "rows read" in err, "a progress line"
        code, out, _ = _ingest(server.url, "predictions", csv_file, capsys)
        assert code == 0 and "0 new predictions, 2,500 already stored" in out

        reading = client.calibration(window="24h")
        assert reading.n_predictions == 2_500 + 3_000 + 1_500
        assert client.calibration(window="24h", cohort="region=apac").n_predictions == sum(
            (i % 3 == 0) for n in (2_500, 3_000, 1_500) for i in range(n)
        )

        labels = pa.table(
            {
                "id": [f"f{i}" for i in range(2_000)],
                "label": [["a", "b", "c"][i % 3] for i in range(2_000)],
                "ts": [datetime.now(UTC).isoformat() for _ in range(2_000)],
            }
        )
        pa_csv.write_csv(labels, tmp_path / "labels.csv")
        code, out, err = _ingest(server.url, "labels", tmp_path / "labels.csv", capsys)
        assert code == 0, err
        assert "2,000 labels applied" in out
        assert client.calibration(window="24h").n_labeled == 2_000

        pq.write_table(whole.drop_columns(["ts"]), tmp_path / "no-ts.parquet")
        code, _, err = _ingest(server.url, "predictions", tmp_path / "no-ts.parquet", capsys)
        assert code == 2 and "missing column(s): ts" in err
        (tmp_path / "p.txt").write_text("id\n")
        code, _, err = _ingest(server.url, "predictions", tmp_path / "p.txt", capsys)
        assert code == 2 and "expected a .csv, .parquet or .arrow file" in err
        client.close()


def _predictions_csv(path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """A CSV of predictions: ``(id, logits, region, lang)`` per row, an empty string an empty
    cell; every row an hour old."""
    ts = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    lines = ["id,ts,logits,region,lang"]
    lines += [f'{i},{ts},"{logits}",{region},{lang}' for i, logits, region, lang in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_empty_cohort_cell_leaves_that_key_out_of_that_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    regions = ["emea", "", "apac", "emea", ""]
    langs = ["tr", "hu", "", "", "id"]
    rows = [(f"e{i}", "[1, 0, -1]", regions[i % 5], langs[i % 5]) for i in range(500)]
    csv_file = _predictions_csv(tmp_path / "gaps.csv", rows)
    parquet_file = tmp_path / "gaps.parquet"
    table = pa_csv.read_csv(csv_file).drop_columns(["region", "lang"])
    table = table.set_column(0, "id", pa.array([f"q{i}" for i in range(500)]))
    nulls = {"region": [r or None for r, _ in zip(regions * 100, range(500), strict=False)]}
    nulls["lang"] = [v or None for v, _ in zip(langs * 100, range(500), strict=False)]
    pq.write_table(
        table.append_column("region", pa.array(nulls["region"])).append_column(
            "lang", pa.array(nulls["lang"])
        ),
        parquet_file,
    )
    with serving_fresh(tmp_path) as server:
        client = Calmon(server.url, ADMIN_TOKEN, model="glyphs")
        client.fit(fit_body("glyphs"))
        for path in (csv_file, parquet_file):
            code, out, err = _ingest(server.url, "predictions", path, capsys)
            assert code == 0, err
            assert "500 of 500 rows acknowledged: 500 new predictions" in out
        assert client.calibration(window="24h").n_predictions == 1_000

        def count(cohort: str) -> int:
            return client.calibration(window="24h", cohort=cohort).n_predictions

        assert count("region=emea") == 400 and count("region=apac") == 200
        assert count("lang=tr") == count("lang=hu") == count("lang=id") == 200
        client.close()


def test_a_bad_logits_cell_names_its_file_row_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [(f"b{i}", "[1, 0, -1]", "emea", "tr") for i in range(20)]
    rows[6] = ("b6", "[1, 0, oops]", "emea", "tr")
    not_json = _predictions_csv(tmp_path / "not-json.csv", rows)
    rows[6] = ("b6", "[1, 0, -1]", "emea", "tr")
    rows[11] = ("b11", "[1, 0]", "emea", "tr")
    ragged = _predictions_csv(tmp_path / "ragged.csv", rows)
    # Record batches of 700 rows: the row counts on across them.
    table = _table(0, 2_000)
    logits = table.column("logits").to_pylist()
    logits[1_499] = logits[1_499][:2]
    arrow_file = _arrow(
        table.set_column(2, "logits", pa.array(logits, pa.list_(pa.float64()))),
        tmp_path / "ragged.arrow",
    )
    with serving_fresh(tmp_path) as server:
        client = Calmon(server.url, ADMIN_TOKEN, model="glyphs")
        client.fit(fit_body("glyphs"))
        client.close()
        for path, named in (
            (not_json, "row 7, column logits: expected a JSON array of numbers"),
            (ragged, "row 12, column logits: 2 logits where the rows before hold 3"),
            (arrow_file, "row 1,500, column logits: 2 logits where the rows before hold 3"),
        ):
            code, _, err = _ingest(server.url, "predictions", path, capsys)
            assert code == 2
            assert f"{path}: {named}" in err


def test_progress_counts_rows_as_they_are_acknowledged(tmp_path: Path) -> None:
    path = _arrow(_table(0, 3_000), tmp_path / "p.arrow")
    with serving_fresh(tmp_path) as server:
        client = Calmon(server.url, ADMIN_TOKEN, model="glyphs", batch_size=100)
        client.fit(fit_body("glyphs"))
        err = io.StringIO()
        report = ingest_file(client, "predictions", path, err, progress_seconds=0.02)
        client.close()
    assert report.sent == 3_000
    lines = err.getvalue().splitlines()
    counts = [int(re.findall(r"([\d,]+) acknowledged", line)[0].replace(",", "")) for line in lines]
    assert counts[-1] == 3_000
    during = counts[:-1]
    assert during == sorted(during), "acknowledged rows only grow"
    assert any(0 < n < 3_000 for n in during), lines


@pytest.mark.slow
def test_times_without_a_zone_are_refused_or_read_as_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(0, 400)
    naive = table.set_column(1, "ts", table.column("ts").cast(pa.timestamp("us")))
    parquet_file = tmp_path / "naive.parquet"
    pq.write_table(naive, parquet_file)
    csv_file = tmp_path / "naive.csv"
    _csv(_table(1_000, 300), csv_file)
    # Text without an offset: every other row, the rest keep theirs.
    lines = csv_file.read_text().splitlines()
    lines[1::2] = [line.replace("+00:00", "", 1) for line in lines[1::2]]
    csv_file.write_text("\n".join(lines) + "\n")
    with serving_fresh(tmp_path) as server:
        with Calmon(server.url, ADMIN_TOKEN) as fitting:
            fitting.fit(fit_body("glyphs"))
        for path in (parquet_file, csv_file):
            code, _, err = _ingest(server.url, "predictions", path, capsys)
            assert code == 2 and "--assume-utc" in err, err
        for path in (parquet_file, csv_file):
            options = ["--url", server.url, "--token", ADMIN_TOKEN, "--model", "glyphs"]
            assert main(["ingest", "predictions", str(path), *options, "--assume-utc"]) == 0
            assert "0 rejected" in capsys.readouterr().out
        status, reading = server.call("GET", "/v1/models/glyphs/calibration?window=24h")
        assert status == 200 and reading["n_predictions"] == 700


@pytest.mark.slow
def test_a_refused_batchs_reply_is_printed_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wide = _table(0, 50)
    wide = wide.set_column(
        2, "logits", pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(50 * 5)), 5)
    )
    path = tmp_path / "wide.parquet"
    pq.write_table(wide, path)
    with serving_fresh(tmp_path) as server:
        with Calmon(server.url, ADMIN_TOKEN) as fitting:
            fitting.fit(fit_body("glyphs"))
        code, _, err = _ingest(server.url, "predictions", path, capsys)
    assert code == 1
    head, _, rest = err.partition("its reply to the last rejected batch:\n")
    assert "the service rejected 50 rows" in head
    refusal = json.loads(rest)
    assert refusal["status"] == 422
    assert {"code", "message", "details"} <= set(refusal["reply"]["error"])
