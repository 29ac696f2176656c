"""Benchmark how much the Python client slows a model server that logs every prediction.

    python bench/bench_client.py [--rate 20000] [--seconds 5] [--per-call 50] [--rounds 3]

The receiving end runs at ``nice 19``, standing in for a service on other machines (on a
2-core machine a service at full priority takes the loop's cores): with ``--target sink`` a
stub that reads each Arrow body and acknowledges its rows (the client's own cost alone), with
``--target calmon`` ``calmon serve`` on a fresh PostgreSQL database next to
``CALMON_BENCH_DATABASE_URL`` (as ``bench_stream.py``; PostgreSQL's own backends are not
reniced), with a K = 10 model registered. The model server is a loop of calls,
each computing the logits of ``--per-call`` inputs (a float64 matrix product, sized so that the
loop alone serves ``--rate`` predictions per second on this machine) and building their ids.
Each round times the same number of calls twice, alone and with ``Calmon.log_predictions``
after every call (ids, logits, one cohort key; times left to the client), in alternating order;
the slowdown is the extra wall time as a share of the loop's own time, the median over rounds.
Beside it, the client's CPU: the extra CPU seconds of the process per prediction (the caller's
thread and the sender thread, the flush after the logged run included) times ``--rate``, the
share of each second a loop serving ``--rate`` predictions/s on one core gives to the client.
On a busy machine the wall figure is noisy; the CPU figure bounds the wall slowdown when the
sender's work holds the interpreter lock throughout. Every prediction must have been
acknowledged.
"""

from __future__ import annotations

import os

# The model server's BLAS runs on its own thread, as in a worker process of a model server (and
# so that idle BLAS threads spinning do not count as the client's CPU).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_stream
from bench_stream import call, drop_database, fresh_database, start_service, synthetic_fit_body

from service.client import Calmon

K = 10
REGIONS = np.array(["emea", "apac", "amer"])


#: The stub receiver: reads each Arrow stream and acknowledges its rows as calmon would.
SINK = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pyarrow as pa

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        rows = pa.ipc.open_stream(body).read_all().num_rows
        out = json.dumps({"accepted": rows, "duplicates": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        self.do_POST()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""


def start_sink() -> subprocess.Popen[bytes]:
    port = str(bench_stream.PORT)
    proc = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", SINK, port])
    for _ in range(100):
        if bench_stream.port_in_use():
            return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the sink did not start")


def renice_tree(pid: int) -> None:
    """``renice 19`` a process and its children (calmon's gunicorn workers)."""
    children = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    subprocess.run(["renice", "-n", "19", "-p", str(pid), *children], capture_output=True)


class ModelServer:
    """The loop's own work: logits of ``per_call`` inputs through ``layers`` matrix products."""

    def __init__(self, per_call: int, width: int, layers: int, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.per_call = per_call
        self.weights = [rng.normal(size=(width, width)) / np.sqrt(width) for _ in range(layers)]
        self.head = rng.normal(size=(width, K))
        self.inputs = rng.normal(size=(per_call, width))

    def serve(self, call_index: int) -> tuple[list[str], np.ndarray]:
        h = self.inputs
        for w in self.weights:
            h = np.tanh(h @ w)
        base = call_index * self.per_call
        ids = [f"q{base + i}" for i in range(self.per_call)]
        return ids, h @ self.head


def calibrated(per_call: int, rate: float) -> ModelServer:
    """A model whose loop alone serves about ``rate`` predictions per second here."""
    layers = 1
    while True:
        model = ModelServer(per_call, 256, layers)
        start = time.perf_counter()
        for i in range(200):
            model.serve(i)
        per_second = 200 * per_call / (time.perf_counter() - start)
        if per_second <= rate * 1.05:
            return model
        layers = max(layers + 1, int(layers * per_second / rate))


def run(model: ModelServer, calls: int, offset: int, client: Calmon | None) -> tuple[float, float]:
    """Wall and process CPU seconds of ``calls`` calls (ids from ``offset``), logging each with
    ``client``; with a client the CPU seconds include its flush (all its work for the calls)."""
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(offset, offset + calls):
        ids, logits = model.serve(i)
        if client is not None:
            client.log_predictions(ids, logits, cohort={"region": REGIONS[i % 3]})
    wall = time.perf_counter() - start
    if client is not None:
        assert client.flush(timeout=600)
    return wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20_000, help="predictions/s of the loop")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed run")
    parser.add_argument("--per-call", type=int, default=50, help="predictions per model call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target", choices=("sink", "calmon"), default="sink")
    args = parser.parse_args()
    base = os.environ.get("CALMON_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name = None
    if args.target == "calmon":
        name, url = fresh_database(base)
        service = start_service(url, args.workers, 1)
    else:
        service = start_sink()
    try:
        if args.target == "calmon":
            conn = bench_stream.http.client.HTTPConnection("127.0.0.1", bench_stream.PORT, 600)
            status, raw = call(conn, "POST", "/v1/contracts/fit", synthetic_fit_body("bench"))
            assert status == 201, raw
        renice_tree(service.pid)
        model = calibrated(args.per_call, args.rate)
        calls = max(1, int(args.seconds * args.rate / args.per_call))
        client = Calmon(f"http://127.0.0.1:{bench_stream.PORT}", bench_stream.TOKEN, model="bench")
        shares, cpu_shares, alone_rates = [], [], []
        # Warm-up: the first conversions import parts of pyarrow.
        run(model, 20, 0, client)
        offset = 20
        for round_ in range(args.rounds):
            order = (None, client) if round_ % 2 == 0 else (client, None)
            seconds = {}
            for logger in order:
                seconds[logger is not None] = run(model, calls, offset, logger)
                if logger is not None:
                    offset += calls
            (alone, alone_cpu), (logged, logged_cpu) = seconds[False], seconds[True]
            shares.append((logged - alone) / alone)
            cpu_shares.append((logged_cpu - alone_cpu) / (calls * args.per_call) * args.rate)
            alone_rates.append(calls * args.per_call / alone)
            print(
                f"round {round_ + 1}: loop alone {alone:.2f} s"
                f" ({calls * args.per_call / alone:,.0f} predictions/s, {alone_cpu:.2f} CPU s),"
                f" with the client {logged:.2f} s ({logged_cpu:.2f} CPU s): wall"
                f" {shares[-1]:+.1%}; client CPU at {args.rate:,.0f}/s: {cpu_shares[-1]:.1%}",
                flush=True,
            )
        stats = client.stats
        client.close()
        assert stats.sent == offset * args.per_call == stats.accepted, stats
        offset -= 20
        assert stats.dropped == 0 and stats.rejected == 0, stats
    finally:
        service.terminate()
        service.wait(timeout=60)
        if name is not None:
            drop_database(base, name)
    print(
        f"\nreceiver: {args.target}; {args.per_call} predictions per call, K = {K}, loop alone"
        f" {statistics.median(alone_rates):,.0f} predictions/s (target {args.rate:,.0f});"
        f" {stats.sent:,} predictions sent, {stats.retried:,} retried, {stats.dropped:,} dropped\n"
        f"slowdown with the client (median of {args.rounds} rounds):"
        f" {statistics.median(shares):+.1%} of the loop's own wall time (target < 5%);"
        f" the client's CPU (both threads) at {args.rate:,.0f} predictions/s:"
        f" {statistics.median(cpu_shares):.1%} of each second"
    )


if __name__ == "__main__":
    main()
