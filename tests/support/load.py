"""A sustained load on a served calmon through ``service.client``, keeping what calmon
acknowledged so a test can check that each of it is stored exactly once.

``Load`` runs, each in a thread of its own:

- ``clients`` feeders, each a ``Calmon`` client logging 200-prediction batches and, one batch
  later, their labels, paced to ``rows_per_second`` (predictions and labels) in all;
- a prober posting one prediction at a time every ``PROBE_SECONDS`` and sending it again until
  calmon acknowledges it, noting when each reply came: the gaps between acknowledgements are the
  seconds without a write;
- an auditor that fits a contract, asks the gate about it and retires every third one, through
  the client's idempotent writes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from service.client import Calmon
from service.client.results import RequestFailed
from service.client.transport import Transport, Unreachable

BATCH = 200
PROBE_SECONDS = 0.05
MODEL = "load"
AUDITED_MODEL = "audited"


@dataclass
class Reply:
    """One reply the prober or the auditor got: when it came (monotonic), how long it took, its
    status (0: no reply, the connection was lost)."""

    at: float
    seconds: float
    status: int

    @property
    def sent(self) -> float:
        """When its request was sent (monotonic)."""
        return self.at - self.seconds


@dataclass
class Load:
    """See the module docstring; ``start`` and ``stop`` it around the failures."""

    url: str
    token: str
    contract_body: dict[str, Any]
    clients: int = 3
    rows_per_second: float = 2200.0
    classes: int = 3
    predictions: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    contracts: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    started_at: float = 0.0
    stopped_at: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _feeders: list[Calmon] = field(default_factory=list)
    _auditor: Calmon | None = None

    def start(self) -> None:
        self.started_at = time.monotonic()
        for index in range(self.clients):
            client = Calmon(
                self.url,
                self.token,
                MODEL,
                batch_size=BATCH,
                max_delay=0.05,
                backoff=0.1,
                max_backoff=0.5,
                timeout=30,
            )
            self._feeders.append(client)
            self._spawn(self._feed, client, index)
        self._auditor = Calmon(self.url, self.token, backoff=0.1, max_backoff=0.5, timeout=30)
        self._spawn(self._probe)
        self._spawn(self._audit, self._auditor)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=self._guarded, args=(target, *args), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _guarded(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:
            with self._lock:
                self.failures.append(f"{target.__name__}: {type(exc).__name__}: {exc}")

    def _feed(self, client: Calmon, index: int) -> None:
        """200 predictions, then the labels of the batch before, ``rows_per_second`` / clients
        rows a second."""
        rng = np.random.default_rng(index)
        interval = 2 * BATCH * self.clients / self.rows_per_second
        previous: list[str] = []
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            ids = [f"c{index}-{n + i}" for i in range(BATCH)]
            n += BATCH
            logits = rng.normal(size=(BATCH, self.classes))
            client.log_predictions(ids, logits, cohort={"client": str(index)})
            with self._lock:
                self.predictions.extend(ids)
            if previous:
                labels = rng.integers(0, self.classes, size=len(previous)).tolist()
                client.log_labels(previous, labels)
                with self._lock:
                    self.labels.extend(previous)
            previous = ids
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _probe(self) -> None:
        transport = Transport(self.url, self.token, timeout=30)
        try:
            self._probe_on(transport)
        finally:
            transport.close()

    def _probe_on(self, transport: Transport) -> None:
        n = 0
        while not self._stop.is_set():
            row_id = f"probe-{n}"
            body = {
                "model": MODEL,
                "predictions": [
                    {"id": row_id, "ts": _now(), "cohort": {"client": "probe"}, "logits": [1, 0, 0]}
                ],
            }
            while True:
                began = time.monotonic()
                try:
                    status, _ = transport.json("POST", "/v1/predictions", body)
                except Unreachable:
                    status = 0
                with self._lock:
                    self.replies.append(Reply(time.monotonic(), time.monotonic() - began, status))
                if status == 200:
                    with self._lock:
                        self.probes.append(row_id)
                    break
                if status not in (0, 503):
                    raise AssertionError(f"the probe got {status}")
                time.sleep(PROBE_SECONDS)
            n += 1
            self._stop.wait(PROBE_SECONDS)

    def _audit(self, client: Calmon) -> None:
        n = 0
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                contract = client.fit({**self.contract_body, "model": AUDITED_MODEL})
                with self._lock:
                    self.contracts.append(contract.id)
                decision = client.gate(contract.id)
                with self._lock:
                    self.decisions.append(decision.id)
                if n % 3 == 2:
                    client.retire(contract.id, f"retired by the load, round {n}")
                    with self._lock:
                        self.retired.append(contract.id)
            except RequestFailed as exc:
                with self._lock:
                    self.replies.append(
                        Reply(time.monotonic(), time.monotonic() - began, exc.status)
                    )
                raise
            n += 1
            self._stop.wait(0.3)

    def stop(self, drain_seconds: float = 180.0) -> bool:
        """Stop logging, wait until every row logged was sent; True if all went out."""
        self._stop.set()
        self.stopped_at = time.monotonic()
        for thread in self._threads:
            thread.join(timeout=drain_seconds)
        sent = all(client.close(timeout=drain_seconds) for client in self._feeders)
        if self._auditor is not None:
            self._auditor.close()
        return sent

    # -- what happened ---------------------------------------------------------------------

    def rows_retried(self) -> int:
        return sum(client.stats.retried for client in self._feeders)

    def rows_rejected(self) -> int:
        return sum(client.stats.rejected + client.stats.dropped for client in self._feeders)

    def write_retries(self) -> int:
        return 0 if self._auditor is None else self._auditor.write_retries

    def seconds_without_write(self, since: float) -> float:
        """Seconds without an acknowledged write around ``since`` (monotonic): from the last
        probe acknowledged before it to the first acknowledged of those sent after it."""
        with self._lock:
            acks = [r for r in self.replies if r.status == 200]
        before = max((r.at for r in acks if r.at <= since), default=since)
        after = min((r.at for r in acks if r.sent >= since), default=float("inf"))
        return after - before

    def first_write_after(self, since: float, timeout: float) -> float:
        """Wait until a probe sent after ``since`` is acknowledged; when it was."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                acks = [r.at for r in self.replies if r.status == 200 and r.sent >= since]
            if acks:
                return min(acks)
            time.sleep(0.1)
        raise TimeoutError(f"no write acknowledged within {timeout} s")

    def replies_between(self, start: float, end: float) -> list[Reply]:
        with self._lock:
            return [r for r in self.replies if start <= r.at <= end]


def _now() -> str:
    return datetime.now(UTC).isoformat()
