"""``Calmon``: log predictions and labels from a model server without slowing it, and call the
service's main endpoints synchronously.

    from service.client import Calmon

    calmon = Calmon("http://calmon:8000", token, model="tickets")
    calmon.log_predictions(ids, logits)          # returns at once; sent in the background
    calmon.log_labels(ids, labels)
    calmon.close()                               # else at interpreter exit

Logging never raises for the service's state: rows wait in a bounded queue while it is down and
are retried (see ``sender``); ``stats`` counts what was sent, retried, dropped and rejected.
Every logged row is sent or counted: a script that ends without ``close`` flushes at exit for at
most ``close_timeout`` seconds and reports on stderr the rows that were not stored.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from service.client.columns import pending, prepare
from service.client.results import Contract, GateDecision, History, Reading, RequestFailed
from service.client.sender import RETRIED_STATUSES, Sender, SenderStats
from service.client.transport import Transport, Unreachable


class Calmon:
    """A client of one calmon service, logging for one ``model`` (see the module docstring).

    ``batch_size`` rows at most per request (default 10,000), sent when that many wait or the
    oldest has waited ``max_delay`` seconds; at most ``max_queue`` rows wait, and a call that
    finds the queue full blocks until there is room (``when_full="block"``) or has its rows
    dropped and counted (``"drop"``). ``timeout``: seconds per HTTP request.
    ``close_timeout``: seconds ``close`` (and the flush at interpreter exit) waits for the rows
    still queued before it counts them as dropped.

    The writes ``fit``, ``register``, ``retire`` and ``gate`` send a fresh ``Idempotency-Key``
    and, after a 429, 502, 503 or 504 reply or a connection lost with the request under way
    (its outcome unknown; a refused connection is not retried), send the same request with the
    same key again, with the same backoff as the sender, for at most ``retry_seconds``: the
    service makes the write once and answers the retry with its result. ``write_retries``
    counts those second sendings.
    """

    def __init__(
        self,
        url: str,
        token: str,
        model: str | None = None,
        *,
        batch_size: int = 10_000,
        max_delay: float = 1.0,
        max_queue: int = 1_000_000,
        when_full: str = "block",
        timeout: float = 60.0,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        close_timeout: float = 30.0,
        retry_seconds: float = 120.0,
    ) -> None:
        self.url, self.model = url.rstrip("/"), model
        self._token, self._timeout = token, timeout
        Transport(url, token)  # checks the URL now
        self._local = threading.local()
        self._sender: Sender | None = None
        self._sender_options: dict[str, Any] = {
            "batch_size": batch_size,
            "max_delay": max_delay,
            "max_queue": max_queue,
            "when_full": when_full,
            "backoff": backoff,
            "max_backoff": max_backoff,
            "close_timeout": close_timeout,
        }
        if when_full not in ("block", "drop"):
            raise ValueError("when_full is 'block' or 'drop'")
        self._backoff, self._max_backoff = backoff, max_backoff
        self._retry_seconds = retry_seconds
        self.write_retries = 0
        self._lock = threading.Lock()
        self._call_transports: list[Transport] = []
        if model is not None:
            prepare()  # at startup rather than on the first logging call

    # -- logging ---------------------------------------------------------------------------

    def _transport(self) -> Transport:
        return Transport(self.url, self._token, self._timeout)

    def _sender_for_logging(self) -> Sender:
        if self.model is None:
            raise ValueError("give Calmon(..., model=...) to log predictions and labels")
        with self._lock:
            if self._sender is None:
                self._sender = Sender(self._transport, self.model, **self._sender_options)
            return self._sender

    def _log(self, kind: str, ids: Any, values: Any, ts: Any, cohort: Any) -> int:
        sender = self._sender_for_logging()
        size = sender._options.batch_size
        n = len(ids)
        queued = 0
        for start in range(0, n, size):
            end = min(n, start + size)
            part = (
                (ids, values, ts, cohort)
                if (start, end) == (0, n)
                else (
                    ids[start:end],
                    values[start:end],
                    _slice(ts, start, end),
                    None
                    if cohort is None
                    else {k: _slice(v, start, end) for k, v in cohort.items()},
                )
            )
            if sender.put(pending(kind, *part)):
                queued += end - start
        return queued

    def log_predictions(
        self,
        ids: Sequence[Any] | Any,
        logits_or_scores: Any,
        ts: Any = None,
        cohort: Mapping[str, Any] | None = None,
    ) -> int:
        """Queue predictions: ``ids`` (N), ``logits_or_scores`` ((N, K) logits or (N,) scores),
        ``ts`` (one time, N times, or None for now), ``cohort`` (key to one value or N values).
        Lists, numpy arrays and pandas columns are taken. Returns the rows queued (fewer when a
        full queue dropped them); ``ValueError`` for mismatched lengths."""
        return self._log("predictions", ids, logits_or_scores, ts, cohort)

    def log_labels(self, ids: Sequence[Any] | Any, labels: Any, ts: Any = None) -> int:
        """Queue labels (class indices or class names) of predictions logged before."""
        return self._log("labels", ids, labels, ts, None)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row logged so far was sent (or rejected); False on timeout."""
        return True if self._sender is None else self._sender.flush(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush for at most ``timeout`` seconds (default ``close_timeout``) and stop the
        sender; True if all was sent. Also closes the connections of the synchronous calls."""
        with self._lock:
            sender = self._sender
            transports = list(self._call_transports)
        for transport in transports:
            transport.close()
        return True if sender is None else sender.close(timeout)

    @property
    def stats(self) -> SenderStats:
        """The sender's counters (a copy)."""
        if self._sender is None:
            return SenderStats()
        with self._sender._lock:
            return SenderStats(**vars(self._sender.stats))

    def __enter__(self) -> Calmon:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- synchronous calls -----------------------------------------------------------------

    def _call_transport(self) -> Transport:
        transport = getattr(self._local, "transport", None)
        if transport is None:
            transport = self._local.transport = self._transport()
            with self._lock:
                self._call_transports.append(transport)
        return transport

    def _call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        status, reply = self._call_transport().json(method, path, body)
        if status not in ok:
            raise RequestFailed(status, reply)
        return reply

    def _write(self, path: str, body: Any, ok: tuple[int, ...], key: str | None = None) -> Any:
        """POST an audited write with ``key`` as its ``Idempotency-Key`` (default: a fresh one),
        sent again with that key while the reply says to retry or the connection is lost (see
        the class docstring)."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        deadline = time.monotonic() + self._retry_seconds
        attempt = 0
        while True:
            try:
                status, reply = self._call_transport().json("POST", path, body, headers)
            except Unreachable as exc:
                if _never_sent(exc) or time.monotonic() >= deadline:
                    raise
            else:
                if status in ok:
                    return reply
                if status not in RETRIED_STATUSES or time.monotonic() >= deadline:
                    raise RequestFailed(status, reply)
            with self._lock:
                self.write_retries += 1
            time.sleep(min(self._max_backoff, self._backoff * 2**attempt))
            attempt += 1

    def _model(self, model: str | None) -> str:
        chosen = model or self.model
        if chosen is None:
            raise ValueError("name the model")
        return quote(chosen, safe="")

    def fit(self, body: Mapping[str, Any], *, idempotency_key: str | None = None) -> Contract:
        """``POST /v1/contracts/fit``: the service fits the calibrator and measures the
        baseline on the sets in ``body``; the registered contract. An ``idempotency_key`` sent
        before with the same body gets the contract that request registered, and registers
        nothing (default: a fresh key)."""
        path = "/v1/contracts/fit"
        return Contract.of(self._write(path, dict(body), (201,), idempotency_key))

    def register(self, body: Mapping[str, Any], *, idempotency_key: str | None = None) -> Contract:
        """``POST /v1/contracts``: register a contract fitted elsewhere (``idempotency_key`` as
        for ``fit``)."""
        return Contract.of(self._write("/v1/contracts", dict(body), (201,), idempotency_key))

    def contracts(self, model: str | None = None, *, limit: int = 100) -> list[Contract]:
        """``GET /v1/contracts?model=``: the model's newest ``limit`` contracts, newest first
        (a reader token)."""
        query = urlencode({"model": self.model if model is None else model, "limit": limit})
        reply = self._call("GET", f"/v1/contracts?{query}")
        return [Contract.of(c) for c in reply["contracts"]]

    def contract(self, model: str | None = None) -> Contract:
        """``GET /v1/models/{model}/contract``: the active contract (``RequestFailed`` 404
        without one)."""
        return Contract.of(self._call("GET", f"/v1/models/{self._model(model)}/contract"))

    def calibration(
        self, model: str | None = None, *, window: str = "24h", cohort: str = "all"
    ) -> Reading:
        """``GET /v1/models/{model}/calibration`` over a trailing ``window`` and a cohort slice
        (``all`` or ``key=value``)."""
        query = urlencode({"window": window, "cohort": cohort})
        return Reading.of(self._call("GET", f"/v1/models/{self._model(model)}/calibration?{query}"))

    def history(
        self,
        model: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        step: str = "1h",
        cohort: str = "all",
    ) -> History:
        """``GET /v1/models/{model}/history``: readings per ``step`` over ``[start, end)``
        (RFC 3339; the service's defaults when None)."""
        params = {"step": step, "cohort": cohort, "start": start, "end": end}
        query = urlencode({k: v for k, v in params.items() if v is not None})
        return History.of(self._call("GET", f"/v1/models/{self._model(model)}/history?{query}"))

    def gate(self, contract_id: str, policy: Mapping[str, Any] | None = None) -> GateDecision:
        """``POST /v1/gate``: decide whether a contract may ship (a gate or admin token)."""
        body: dict[str, Any] = {"contract_id": contract_id}
        if policy is not None:
            body["policy"] = dict(policy)
        return GateDecision.of(self._write("/v1/gate", body, (201,)))

    def retire(self, contract_id: str, reason: str) -> Contract:
        """``POST /v1/contracts/{id}/retire``: retire a contract (an admin token)."""
        path = f"/v1/contracts/{quote(contract_id, safe='')}/retire"
        return Contract.of(self._write(path, {"reason": reason}, (200,)))


def _never_sent(exc: Unreachable) -> bool:
    """Whether the request cannot have reached the service (nothing listens, the name does not
    resolve): nothing to repeat."""
    return isinstance(exc.__cause__, ConnectionRefusedError | socket.gaierror)


def _slice(value: Any, start: int, end: int) -> Any:
    """Rows ``start:end`` of a column; a scalar (one value for every row) as it is."""
    if value is None or isinstance(value, str) or not hasattr(value, "__len__"):
        return value
    return value[start:end]
