"""The sender's accounting when its thread fails or a request never returns: every logged row
ends up counted (sent, rejected or dropped) and a loss is reported on stderr."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest

from service.client.columns import Pending, pending
from service.client.sender import Sender
from service.client.transport import Transport


def _rows(n: int, prefix: str = "r") -> Pending:
    return pending("predictions", [f"{prefix}{i}" for i in range(n)], np.zeros(n), None, None)


@pytest.fixture
def silent_peer() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) and never replies."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_rows_in_a_request_that_outlives_close_are_counted_as_dropped_once(
    silent_peer: str,
) -> None:
    sender = Sender(lambda: Transport(silent_peer, "t", timeout=3), "m", max_delay=0.05)
    assert sender.put(_rows(10))
    assert not sender.close(timeout=0.3)
    assert (sender.stats.dropped, sender.stats.sent, sender.stats.queued) == (10, 0, 0)
    # The request times out later; its rows are not counted a second time.
    sender._thread.join(timeout=10)
    assert not sender._thread.is_alive()
    assert (sender.stats.dropped, sender.stats.sent, sender.stats.retried) == (10, 0, 10)


def test_a_thread_that_stops_on_an_error_counts_and_reports_every_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_transport() -> Transport:
        raise MemoryError("no room for a connection")

    sender = Sender(no_transport, "m", max_delay=60)
    sender.put(_rows(7))
    sender._thread.join(timeout=10)
    assert not sender._thread.is_alive()
    assert not sender.flush(timeout=5)
    assert sender.stats.dropped == 7 and "MemoryError" in (sender.stats.last_error or "")
    assert not sender.put(_rows(5, "later"))
    assert sender.stats.dropped == 12
    err = capsys.readouterr().err
    assert "the sender of model 'm' stopped on an error" in err and "MemoryError" in err
    sender.close_at_exit()
    assert (
        "calmon client: at exit, 12 of 12 rows logged for model 'm' were not stored: 12 dropped"
        in capsys.readouterr().err
    )


def test_a_sender_closed_by_its_owner_reports_nothing_at_exit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sender = Sender(lambda: Transport("http://127.0.0.1:9", "t"), "m", backoff=0.01)
    sender.put(_rows(3))
    assert not sender.close(timeout=0.2)
    assert sender.stats.dropped == 3
    sender.close_at_exit()
    assert capsys.readouterr().err == ""
