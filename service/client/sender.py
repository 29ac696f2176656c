"""The background sender: a bounded queue of logged rows, sent as Arrow batches by one thread.

Callers append one ``Pending`` per call (no conversion on their thread). The thread sends when
``batch_size`` rows wait, when the oldest waiting row is ``max_delay`` seconds old, or on
``flush``; rows go out in the order they were logged (a label is never sent before a prediction
logged earlier), contiguous calls of one kind and one column layout in one request of at most
``batch_size`` rows. A connection failure or a 502/503/504/429 reply is retried with exponential
backoff (ingest is idempotent by id, so a batch sent twice is counted once) until it goes
through or ``close`` gives up; any other error reply rejects the batch (counted, the reply
kept). When the queue holds ``max_queue`` rows (waiting or in flight) a call blocks until
there is room (``when_full="block"``) or its rows are dropped and counted (``"drop"``).

Every logged row ends up counted once: sent, rejected or dropped. An exception in the thread
(a bug, ``MemoryError``) drops the rows it was sending, counts them and reports them on stderr;
the thread goes on with the next batch. At interpreter exit, a sender its owner did not close
flushes for at most ``close_timeout`` seconds (an ``atexit`` hook; the thread is a daemon, so
it still runs then) and reports on stderr the rows that were not stored.
"""

from __future__ import annotations

import atexit
import random
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from service.client.columns import Pending, merged, prepare, record_batch, stream_bytes
from service.client.transport import Transport, Unreachable

ARROW = "application/vnd.apache.arrow.stream"
#: Replies after which the same batch is sent again.
RETRIED_STATUSES = frozenset({429, 502, 503, 504})


@dataclass
class SenderStats:
    """Counters in rows (predictions and labels together) since the client started.

    ``sent``: acknowledged by the service (new or duplicate); ``retried``: rows of sending
    attempts that failed and were repeated (a batch of 100 tried three times adds 200);
    ``dropped``: refused by a full queue (``when_full="drop"``), abandoned at ``close`` (still
    waiting, or in a request that did not return in time), or lost to an error in the sender
    thread (reported on stderr);
    ``rejected``: refused by the service (``last_error`` holds its reply as text, and
    ``last_rejection`` the status and the decoded reply of the last refused batch). ``accepted``,
    ``duplicates``, ``joined``, ``pending`` add up the replies' counts."""

    sent: int = 0
    retried: int = 0
    dropped: int = 0
    rejected: int = 0
    accepted: int = 0
    duplicates: int = 0
    joined: int = 0
    pending: int = 0
    last_error: str | None = None
    queued: int = 0
    last_rejection: dict[str, Any] | None = None


@dataclass
class _Options:
    batch_size: int
    max_delay: float
    max_queue: int
    when_full: str
    backoff: float
    max_backoff: float
    close_timeout: float


@dataclass
class _State:
    """``in_flight``: rows the thread took and has not yet counted as sent, rejected or
    dropped. ``closed``: ``close`` was called; ``closing``: the thread is to stop (closed, or
    ``stopped`` by an error)."""

    queue: deque[tuple[float, Pending]] = field(default_factory=deque)
    queued: int = 0
    in_flight: int = 0
    flushing: int = 0
    closed: bool = False
    closing: bool = False
    stopped: bool = False
    give_up_at: float | None = None


def _report(message: str, error: BaseException | None = None) -> None:
    """Write one line (and the error's traceback) to stderr, if there is one to write to."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"calmon client: {message}\n")
        if error is not None:
            traceback.print_exception(error, file=stream)
        stream.flush()
    except (OSError, ValueError):
        pass


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _close_at_exit(ref: weakref.ReferenceType[Sender]) -> None:
    sender = ref()
    if sender is not None:
        sender.close_at_exit()


class Sender:
    """One sender thread for one model (see the module docstring)."""

    def __init__(
        self,
        transport_factory: Callable[[], Transport],
        model: str,
        *,
        batch_size: int = 10_000,
        max_delay: float = 1.0,
        max_queue: int = 1_000_000,
        when_full: str = "block",
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        close_timeout: float = 30.0,
    ) -> None:
        if when_full not in ("block", "drop"):
            raise ValueError("when_full is 'block' or 'drop'")
        if not 1 <= batch_size <= 100_000:
            raise ValueError("batch_size is 1-100,000 rows")
        prepare()
        self.model = model
        self.stats = SenderStats()
        self._options = _Options(
            batch_size, max_delay, max_queue, when_full, backoff, max_backoff, close_timeout
        )
        self._state = _State()
        self._lock = threading.Condition()
        self._factory = transport_factory
        self._thread = threading.Thread(
            target=self._run, name=f"calmon-sender-{model}", daemon=True
        )
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    def put(self, item: Pending) -> bool:
        """Queue one call's rows; False if they were dropped (queue full, ``when_full="drop"``,
        or the sender closed)."""
        state, options = self._state, self._options
        with self._lock:
            if state.closing:
                self.stats.dropped += item.n
                return False
            while (held := state.queued + state.in_flight) + item.n > options.max_queue and held:
                if options.when_full == "drop":
                    self.stats.dropped += item.n
                    return False
                self._lock.wait()
                if state.closing:
                    self.stats.dropped += item.n
                    return False
            state.queue.append((time.monotonic(), item))
            state.queued += item.n
            self.stats.queued = state.queued
            if state.queued >= options.batch_size:
                self._lock.notify_all()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued now; True once the queue is empty and nothing is in flight,
        False if ``timeout`` seconds passed first or the thread stopped on an error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        state = self._state
        with self._lock:
            state.flushing += 1
            self._lock.notify_all()
            try:
                while state.queued or state.in_flight:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._lock.wait(left)
                return not state.stopped
            finally:
                state.flushing -= 1

    def close(self, timeout: float | None = None) -> bool:
        """Flush for at most ``timeout`` seconds (default ``close_timeout``), then stop the
        thread, waiting at most one more second for it; rows still waiting or in flight are
        counted as dropped. True if everything was sent."""
        timeout = self._options.close_timeout if timeout is None else timeout
        state = self._state
        with self._lock:
            state.closed = True
            if state.closing and not self._thread.is_alive():
                return state.queued == 0 and not state.stopped
            dropped = self.stats.dropped
            state.give_up_at = time.monotonic() + timeout
        done = self.flush(timeout)
        with self._lock:
            state.closing = True
            self._lock.notify_all()
        self._thread.join(timeout=1.0)
        with self._lock:
            self.stats.dropped += state.queued + state.in_flight
            state.queued = state.in_flight = 0
            state.queue.clear()
            self.stats.queued = 0
            return done and self.stats.dropped == dropped

    def close_at_exit(self) -> None:
        """``close`` at interpreter exit unless the owner closed the sender, then report on
        stderr the rows that were not stored (dropped or rejected) since it started."""
        with self._lock:
            if self._state.closed:
                return
        self.close()
        with self._lock:
            stats = SenderStats(**vars(self.stats))
        lost = stats.dropped + stats.rejected
        if lost:
            _report(
                f"at exit, {lost} of {stats.sent + lost} rows logged for model {self.model!r} "
                f"were not stored: {stats.dropped} dropped, {stats.rejected} rejected "
                f"(last error: {stats.last_error})"
            )

    def _due(self) -> bool:
        state, options = self._state, self._options
        if not state.queue:
            return False
        if state.closing or state.flushing or state.queued >= options.batch_size:
            return True
        return time.monotonic() - state.queue[0][0] >= options.max_delay

    def _take(self) -> list[Pending]:
        """Contiguous calls of the head's kind, up to ``batch_size`` rows (a larger call whole)."""
        state = self._state
        taken: list[Pending] = []
        rows = 0
        while state.queue:
            _, item = state.queue[0]
            if taken and (item.kind != taken[0].kind or rows + item.n > self._options.batch_size):
                break
            state.queue.popleft()
            taken.append(item)
            rows += item.n
        state.queued -= rows
        state.in_flight = rows
        self.stats.queued = state.queued
        self._lock.notify_all()
        return taken

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as error:  # the thread ends: nothing it holds may go uncounted
            self._stop(error)

    def _stop(self, error: BaseException) -> None:
        """Count every row waiting or in flight as dropped; later calls are dropped too."""
        state = self._state
        with self._lock:
            lost = state.queued + state.in_flight
            self.stats.dropped += lost
            self.stats.last_error = f"sender stopped: {_describe(error)}"[:2000]
            state.queue.clear()
            state.queued = state.in_flight = self.stats.queued = 0
            state.closing = state.stopped = True
            self._lock.notify_all()
        _report(
            f"the sender of model {self.model!r} stopped on an error; {lost} rows dropped, "
            "and rows logged from now on are dropped",
            error,
        )

    def _serve(self) -> None:
        transport = self._factory()
        state = self._state
        while True:
            with self._lock:
                while not self._due():
                    if state.closing and not state.queue:
                        transport.close()
                        return
                    wait = self._options.max_delay
                    if state.queue:
                        wait = max(0.0, state.queue[0][0] + wait - time.monotonic())
                    self._lock.wait(wait)
                taken = self._take()
            error: Exception | None = None
            try:
                self._send(transport, taken)
            except Exception as exc:  # a bug or MemoryError drops this batch, not the thread
                error = exc
                transport.close()
            self._settle_batch(error)

    def _settle_batch(self, error: Exception | None) -> None:
        """Count the rows of the batch that ``_send`` left uncounted as dropped, and report them."""
        with self._lock:
            lost, self._state.in_flight = self._state.in_flight, 0
            self.stats.dropped += lost
            if lost and error is not None:
                self.stats.last_error = f"sender failed: {_describe(error)}"[:2000]
            self._lock.notify_all()
        if lost:
            reason = (
                "the sender did not count them"
                if error is None
                else f"sending them failed ({_describe(error)})"
            )
            _report(f"{lost} rows for model {self.model!r} dropped: {reason}", error)

    def _send(self, transport: Transport, taken: list[Pending]) -> None:
        """Convert and send ``taken`` (one request per column layout), retrying as documented."""
        try:
            batches = [record_batch(p) for p in merged(taken)]
        except (ValueError, TypeError, pa.ArrowException) as exc:
            self._rejected(sum(p.n for p in taken), f"unreadable rows: {exc}")
            return
        groups: list[list[pa.RecordBatch]] = []
        for batch in batches:
            if groups and groups[-1][0].schema.equals(batch.schema):
                groups[-1].append(batch)
            else:
                groups.append([batch])
        kind = taken[0].kind
        path = f"/v1/{kind}?model={quote(self.model, safe='')}"
        for group in groups:
            self._send_one(transport, path, group)

    def _send_one(self, transport: Transport, path: str, group: list[pa.RecordBatch]) -> None:
        rows = sum(b.num_rows for b in group)
        body = stream_bytes(group)
        attempt = 0
        while True:
            try:
                status, reply = transport.request("POST", path, body, ARROW)
            except Unreachable as exc:
                status, reply = 0, str(exc)
            if 200 <= status < 300 and isinstance(reply, dict):
                self._acknowledged(rows, reply)
                return
            if status and status not in RETRIED_STATUSES:
                self._rejected(rows, f"{status}: {reply}", {"status": status, "reply": reply})
                return
            delay = min(self._options.max_backoff, self._options.backoff * 2**attempt)
            wake = time.monotonic() + delay * random.uniform(0.5, 1.0)
            with self._lock:
                self.stats.retried += rows
                self.stats.last_error = f"{status or 'unreachable'}: {reply}"[:2000]
                # The backoff ends early when close() stops waiting for the rows.
                while not self._state.closing and (left := wake - time.monotonic()) > 0:
                    self._lock.wait(left)
                give_up = self._state.give_up_at
                if self._state.closing or (give_up is not None and time.monotonic() >= give_up):
                    self.stats.dropped += self._counted(rows)
                    return
            attempt += 1

    def _counted(self, rows: int) -> int:
        """Take ``rows`` of the batch in flight as counted (under the lock); how many were still
        uncounted (none when ``close`` gave them up while the request ran)."""
        taken = min(rows, self._state.in_flight)
        self._state.in_flight -= taken
        return taken

    def _acknowledged(self, rows: int, reply: dict[str, Any]) -> None:
        with self._lock:
            self.stats.sent += self._counted(rows)
            for name in ("accepted", "duplicates", "joined", "pending"):
                value = reply.get(name)
                if isinstance(value, int):
                    setattr(self.stats, name, getattr(self.stats, name) + value)

    def _rejected(self, rows: int, error: str, rejection: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.stats.rejected += self._counted(rows)
            self.stats.last_error = error[:2000]
            if rejection is not None:
                self.stats.last_rejection = rejection
