"""Request logs: one JSON line per request with its id, never a token."""

from __future__ import annotations

import json
import logging
import re

from flask.testing import FlaskClient

from tests.integration.conftest import ADMIN_TOKEN, Auth


def test_requests_are_logged_with_ids_and_never_with_tokens(
    client: FlaskClient, auth: Auth
) -> None:
    records: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Capture()
    logger = logging.getLogger("service")
    logger.addHandler(handler)
    try:
        token = auth.token("reader")
        response = client.get(
            "/v1/contracts", headers={**auth.headers("reader"), "X-Request-ID": "trace-42"}
        )
        assert response.headers["X-Request-ID"] == "trace-42"
        generated = client.get("/healthz").headers["X-Request-ID"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)
        client.get("/v1/contracts", headers={"Authorization": "Bearer calmon_wrong-secret"})
    finally:
        logger.removeHandler(handler)
    lines = [handler.format(r) + json.dumps(r.__dict__, default=str) for r in records]
    entry = next(r for r in records if getattr(r, "request_id", None) == "trace-42")
    assert (entry.method, entry.route, entry.status, entry.principal) == (  # type: ignore[attr-defined]
        "GET",
        "/v1/contracts",
        200,
        "test-reader",
    )
    for line in lines:
        assert token not in line and ADMIN_TOKEN not in line
        assert "calmon_wrong-secret" not in line
