"""``calmon ingest``: CSV, Parquet and Arrow files sent through the client to a real served
calmon, a rerun after an interruption counting every prediction once (both backends)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from service.cli import main
from service.client import Calmon
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
