"""The served edge: what gunicorn refuses before calmon sees it, and bodies without a length,
answered with the JSON envelope like everything else."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import contract_fields, fit_body
from tests.integration.test_gate import run_cli
from tests.integration.test_served import Served, serving_fresh
from tests.integration.test_stream import minutes_ago

pytestmark = pytest.mark.slow

LIMIT = 4_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_fresh(
        tmp_path_factory.mktemp("served-edge"), CALMON_MAX_BODY_BYTES=str(LIMIT)
    ) as server:
        yield server


def exchange(server: Served, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as it is and read the reply to the end (the server closes)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # The server may refuse and close before it has read everything.
        with contextlib.suppress(OSError):
            sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def envelope(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    assert headers["content-type"].startswith("application/json"), (status, body[:200])
    error = json.loads(body)["error"]
    assert {"code", "message", "details"} <= set(error)
    return error  # type: ignore[no-any-return]


def request(
    path: str, headers: dict[str, str] | None = None, body: bytes = b"", method: str = "GET"
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: calmon", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (request("/v1/contracts?model=" + "m" * 5_000), 414, "uri_too_long"),
        (request("/healthz", {"X-Long": "v" * 9_000}), 431, "request_header_fields_too_large"),
        (
            request("/healthz", {f"X-H{i}": "v" for i in range(120)}),
            431,
            "request_header_fields_too_large",
        ),
        (b"NOT AN HTTP REQUEST\r\n\r\n", 400, "bad_request"),
        (request("/healthz", {"Bad Name": "v"}), 400, "bad_request"),
    ],
    ids=["request line", "long header", "many headers", "request line garbage", "header name"],
)
def test_gunicorns_own_refusals_are_the_envelope(
    served: Served, raw: bytes, status: int, code: str
) -> None:
    got, headers, body = exchange(served, raw)
    assert got == status, body[:300]
    assert envelope(got, headers, body)["code"] == code


def chunked(body: bytes, size: int = 1_000) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def post(path: str, body: bytes, *, stated: bool) -> bytes:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    if stated:
        return request(path, {**headers, "Content-Length": str(len(body))}, body, "POST")
    return request(path, {**headers, "Transfer-Encoding": "chunked"}, chunked(body), "POST")


def test_a_body_over_the_limit_is_a_413_with_or_without_its_length(served: Served) -> None:
    assert served.call("POST", "/v1/contracts/fit", fit_body("chunky"))[0] == 201
    batch = {
        "model": "chunky",
        "predictions": [
            {"id": f"p{i}", "ts": minutes_ago(2), "logits": [1, 0, 0]} for i in range(5)
        ],
    }
    fits = json.dumps(batch).encode()
    assert len(fits) < LIMIT
    # Valid JSON up to the limit, then more: cut at the limit it would parse.
    padded = fits + b" " * (LIMIT - len(fits) + 10)
    longer = json.dumps({**batch, "predictions": batch["predictions"] * 40}).encode()
    for body in (padded, longer):
        for stated in (True, False):
            status, headers, reply = exchange(served, post("/v1/predictions", body, stated=stated))
            assert status == 413, (stated, reply[:300])
            error = envelope(status, headers, reply)
            assert error["code"] == "payload_too_large" and str(LIMIT) in error["message"]
    status, reading = served.call("GET", "/v1/models/chunky/calibration?window=1h")
    assert status == 200 and reading["n_predictions"] == 0
    exactly = fits + b" " * (LIMIT - len(fits))
    status, _, reply = exchange(served, post("/v1/predictions", exactly, stated=False))
    assert status == 200 and json.loads(reply)["accepted"] == 5


@pytest.mark.parametrize("rows", [100, 150_000], ids=["read whole", "cut off"])
def test_calmon_fit_of_sets_over_the_limit_says_so_and_how_to_go_on(
    served: Served, tmp_path: Path, rows: int
) -> None:
    # 150,000 rows make a body of some 20 megabytes: the service answers 413 and closes before
    # it has read the body, so the command's sending breaks off under the refusal.
    rng = np.random.default_rng(3)
    for name in ("fit", "eval"):
        logits, labels = rng.normal(size=(rows, 3)), rng.integers(0, 3, rows)
        np.savez(tmp_path / f"{name}.npz", logits=logits, labels=labels)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(contract_fields("over-the-limit")))
    sets = ("--fit", str(tmp_path / "fit.npz"), "--eval", str(tmp_path / "eval.npz"))
    result = run_cli("fit", "--url", served.url, "--token", ADMIN_TOKEN, "--spec", str(spec), *sets)
    assert result.returncode == 2, result.stderr
    assert "payload_too_large" in result.stderr and "fit here with --local" in result.stderr
    assert served.call("GET", "/v1/models/over-the-limit/contract")[0] == 404
