"""The transport's reading of a reply: a server that answers before it has read the body (a
413 for a body over its limit) and closes is heard, not taken for an unreachable service."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from service.client.transport import Transport, Unreachable

REFUSAL = json.dumps({"error": {"code": "payload_too_large", "message": "too big"}}).encode()


@pytest.fixture
def refusing_peer() -> Iterator[str]:
    """A server that reads one request's head, answers 413 and closes with the body unread."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head and (data := conn.recv(4096)):
                head += data
            conn.sendall(
                b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(REFUSAL), REFUSAL)
            )

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(timeout=5)


@pytest.mark.parametrize("size", [100, 64 * 1024 * 1024], ids=["read whole", "cut off"])
def test_a_reply_sent_before_the_body_was_read_is_the_reply(refusing_peer: str, size: int) -> None:
    transport = Transport(refusing_peer, "t", timeout=10)
    try:
        status, reply = transport.request("POST", "/v1/contracts/fit", b"x" * size)
    finally:
        transport.close()
    assert status == 413 and reply["error"]["code"] == "payload_too_large"


def test_a_peer_that_closes_without_a_reply_is_unreachable() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        transport = Transport(f"http://127.0.0.1:{server.getsockname()[1]}", "t", timeout=10)

        def close_at_once() -> None:
            conn, _ = server.accept()
            conn.close()

        thread = threading.Thread(target=close_at_once, daemon=True)
        thread.start()
        with pytest.raises(Unreachable):
            transport.request("POST", "/v1/predictions", b"x" * (64 * 1024 * 1024))
        thread.join(timeout=5)
