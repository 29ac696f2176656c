"""Slow clients against calmon under gunicorn: alone they starve it, behind nginx they do not.

gunicorn hands a connection to a worker thread as soon as its first byte arrives, and the thread
then reads the rest of the request itself, blocking. Clients that trickle a request (one byte
every 2 s here, never finishing it) each hold a thread; once every thread is held, ``/healthz``
gets no answer, which is what makes the Kubernetes liveness probe restart a pod. nginx with the
shipped config (deploy/nginx/calmon.conf, see tests/deploy/nginx.py) reads each request whole
before passing it on, so behind it the same clients never reach gunicorn.

Both tests run ``calmon serve`` with one worker of 4 threads. With the two workers of
``calmon serve``'s default the kernel may hand one worker fewer slow connections than it has
threads, and that worker goes on answering part of the probes: the starvation is certain with
one worker, and a matter of degree with two.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from service.db.migrate import upgrade_to_head
from tests.deploy.nginx import running_nginx
from tests.integration.conftest import ADMIN_TOKEN, fresh_database, front_of_the_database
from tests.integration.factories import fit_body
from tests.integration.test_served import CALMON, STARTUP_SECONDS, free_port, wait_until
from tests.integration.test_stream import minutes_ago

pytestmark = pytest.mark.slow

#: How long a probe waits for its answer (a kubelet's probe gives up after its timeoutSeconds).
PROBE_SECONDS = 2.0
#: How long an ingest request may take, at most, while the slow clients are connected.
INGEST_SECONDS = 10.0
HEADER_CLIENTS = 64
BODY_CLIENTS = 16
TRICKLE_SECONDS = 2.0
#: Longer than the proxy's client_header_timeout (10 s), so nginx drops each slow client once.
ATTACK_SECONDS = 16.0

SLOW_HEADER = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow-client\r\n"
#: A body announced in full but sent one byte per tick (within CALMON_MAX_BODY_BYTES).
SLOW_BODY_HEADER = (
    b"POST /v1/predictions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer " + ADMIN_TOKEN.encode() + b"\r\nContent-Length: 1000000\r\n\r\n"
)


def trickled_header() -> Iterator[bytes]:
    """A request header that never ends (one more header field after another), byte by byte."""
    for n in itertools.count():
        for byte in SLOW_HEADER if n == 0 else b"X-Slow-%d: 1\r\n" % n:
            yield bytes([byte])


def trickled_body() -> Iterator[bytes]:
    """A whole request header at once, then its body byte by byte."""
    yield SLOW_BODY_HEADER
    while True:
        yield b" "


@dataclass
class _Slow:
    sock: socket.socket
    stream: Iterator[bytes]


class SlowClients:
    """Connections to 127.0.0.1:``port`` that each send a request one byte every
    ``TRICKLE_SECONDS`` and never finish it: ``headers`` of them trickle the request header,
    ``bodies`` send a header at once and trickle the body. A connection the server closes is
    counted in ``dropped`` and opened again at the next tick."""

    def __init__(self, port: int, *, headers: int, bodies: int = 0) -> None:
        self.port = port
        self.kinds = [trickled_header] * headers + [trickled_body] * bodies
        self.clients: list[_Slow | None] = []
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def _open(self, index: int) -> _Slow | None:
        stream = self.kinds[index]()
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            return None  # tried again at the next tick
        client = _Slow(sock, stream)
        if not self._send(client):
            return None
        return client

    @staticmethod
    def _send(client: _Slow) -> bool:
        try:
            client.sock.sendall(next(client.stream))
        except OSError:
            client.sock.close()
            return False
        return True

    @staticmethod
    def _closed_by_server(client: _Slow) -> bool:
        # The server never answers an unfinished request: anything readable is its close (an
        # empty read) or a refusal sent before closing.
        poller = select.poll()
        poller.register(client.sock, select.POLLIN)
        try:
            readable = bool(poller.poll(0))
            if readable:
                client.sock.recv(4096)
        except OSError:
            return True
        return readable

    def _tick(self) -> None:
        for index, client in enumerate(self.clients):
            if client is not None and (self._closed_by_server(client) or not self._send(client)):
                client.sock.close()
                self.dropped += 1
                client = None
            self.clients[index] = client or self._open(index)

    def _run(self) -> None:
        while not self._stop.wait(TRICKLE_SECONDS):
            self._tick()

    def __enter__(self) -> SlowClients:
        self.clients = [self._open(index) for index in range(len(self.kinds))]
        assert all(self.clients), "could not open every slow connection"
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for client in self.clients:
            if client is not None:
                client.sock.close()


@dataclass
class Calmon:
    port: int
    process: subprocess.Popen[bytes]


def request(port: int, method: str, path: str, body: Any, timeout: float) -> tuple[int, Any] | None:
    """Send one request on a new connection; (status, JSON reply), or None when no answer came
    within ``timeout`` seconds."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(
            method,
            path,
            body=None if body is None else json.dumps(body),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    except (TimeoutError, OSError):
        return None
    finally:
        connection.close()


def probe(port: int) -> int | None:
    """A liveness probe: ``/healthz``'s status, or None when it gave up after PROBE_SECONDS."""
    answer = request(port, "GET", "/healthz", None, PROBE_SECONDS)
    return None if answer is None else answer[0]


def ingest(port: int, model: str, batch: int) -> tuple[int, Any] | None:
    predictions = [
        {
            "id": f"{batch}-{i}",
            "ts": minutes_ago(3),
            "cohort": {"region": ["emea", "apac"][i % 2]},
            "logits": [float(i % 3), 1.0, 0.5],
        }
        for i in range(20)
    ]
    body = {"model": model, "predictions": predictions}
    return request(port, "POST", "/v1/predictions", body, INGEST_SECONDS)


@contextmanager
def calmon_one_worker(tmp_path: Path) -> Iterator[Calmon]:
    """``calmon serve --workers 1 --threads 4`` on a fresh, migrated database of the backend
    under test, with a registered contract for model ``slow``; stopped afterwards."""
    with fresh_database(tmp_path, "proxy.db") as url:
        upgrade_to_head(url)
        port = free_port()
        env = {
            **os.environ,
            "CALMON_DATABASE_URL": url,
            "CALMON_ADMIN_TOKEN": ADMIN_TOKEN,
            "CALMON_REFRESH_IN_SERVICE": "false",
            "CALMON_LOG_LEVEL": "WARNING",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        }
        log = (tmp_path / "calmon.log").open("wb")
        process = subprocess.Popen(
            [str(CALMON), "serve", "--port", str(port), "--workers", "1", "--threads", "4"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: probe(port) == 200, STARTUP_SECONDS, "calmon to start")
            answer = request(port, "POST", "/v1/contracts/fit", fit_body("slow"), 60)
            assert answer is not None and answer[0] == 201, answer
            yield Calmon(port, process)
        finally:
            process.terminate()
            process.wait(timeout=60)
            log.close()


@dataclass
class Observed:
    """What the probes and the ingest requests got while the slow clients were connected."""

    probes: list[int | None] = field(default_factory=list)
    ingests: list[tuple[int, Any] | None] = field(default_factory=list)


def ingest_until(port: int, deadline: float) -> list[tuple[int, Any] | None]:
    """Send an ingest batch every 2 s until ``deadline`` (``time.monotonic()``)."""
    answers: list[tuple[int, Any] | None] = []
    while time.monotonic() < deadline:
        answers.append(ingest(port, "slow", len(answers)))
        time.sleep(2)
    return answers


def observe(port: int, seconds: float) -> Observed:
    """Probe ``port`` back to back for ``seconds`` while ingest batches go alongside."""
    deadline = time.monotonic() + seconds
    seen = Observed()
    with ThreadPoolExecutor(max_workers=1) as pool:
        ingests = pool.submit(ingest_until, port, deadline)
        while time.monotonic() < deadline:
            seen.probes.append(probe(port))
            time.sleep(0.25)
        seen.ingests = ingests.result()
    return seen


@front_of_the_database
def test_slow_clients_starve_gunicorn_alone(tmp_path: Path) -> None:
    with calmon_one_worker(tmp_path) as calmon:
        assert probe(calmon.port) == 200
        with SlowClients(calmon.port, headers=HEADER_CLIENTS):
            time.sleep(1)  # the worker takes them up
            starved = observe(calmon.port, 3 * PROBE_SECONDS)
        # Every probe and every ingest request went unanswered: all four threads were reading
        # slow headers, and the requests waited behind the other slow connections.
        assert starved.probes and set(starved.probes) == {None}, starved
        assert starved.ingests and set(starved.ingests) == {None}, starved
        # Without the slow clients the same server answers again.
        wait_until(lambda: probe(calmon.port) == 200, STARTUP_SECONDS, "calmon to answer again")


@front_of_the_database
def test_behind_nginx_slow_clients_do_not_reach_gunicorn(tmp_path: Path) -> None:
    with calmon_one_worker(tmp_path) as calmon:
        proxy = free_port()
        with running_nginx(tmp_path / "nginx", proxy, f"127.0.0.1:{calmon.port}"):
            with SlowClients(proxy, headers=HEADER_CLIENTS, bodies=BODY_CLIENTS) as slow:
                seen = observe(proxy, ATTACK_SECONDS)
            # Each probe was answered within PROBE_SECONDS, all along.
            assert len(seen.probes) >= 8 and set(seen.probes) == {200}, seen
            assert len(seen.ingests) >= 1, seen
            for batch, answer in enumerate(seen.ingests):
                assert answer is not None, f"ingest batch {batch} got no answer"
                status, reply = answer
                assert status == 200, reply
                assert reply["accepted"] == 20, reply
            # nginx's client_header_timeout bounds the whole header, not the pause between two
            # bytes (2 s here): it closed slow header connections while their bytes kept coming.
            assert slow.dropped >= 1
