"""The audit log: filtered listing (JSON or CSV) and verification of its hash chain."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Annotated, Any

from flask import Blueprint, Response
from pydantic import WithJsonSchema

from service.audit import service as audit_service
from service.audit.chain import Anchor
from service.audit.replies import AuditEvents, ChainVerification
from service.audit.store import AuditEvent as StoredEvent
from service.auth.tokens import Permission
from service.common.errors import ErrorCollector
from service.common.values import format_timestamp
from service.contracts import service as contracts_service
from service.web.auth import requires
from service.web.db_session import db_session
from service.web.operations import CSV, operation
from service.web.queries import (
    MAX_SEQ,
    CursorParam,
    Query,
    TextParam,
    TimestampParam,
    choice,
    fetch_page,
    limit_of,
)
from service.web.replies import reply

bp = Blueprint("audit", __name__, url_prefix="/v1/audit")

_CSV_COLUMNS = (
    "seq",
    "ts",
    "type",
    "actor",
    "model",
    "contract_id",
    "details",
    "prev_sha256",
    "sha256",
)
#: A cell a spreadsheet could read as a formula starts with one of these (OWASP, CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")


def csv_cell(value: Any) -> Any:
    """A CSV cell no spreadsheet runs: text starting with ``= + - @``, tab or CR gets a leading
    ``'`` (OWASP's CSV-injection advice); numbers and other text are written as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


class AuditEventsQuery(Query):
    """A page of the log (``limit`` events after ``cursor``), filtered by model, event type
    and time (``since`` inclusive, ``until`` exclusive), as JSON or CSV."""

    model: TextParam = None
    type: TextParam = None
    since: TimestampParam = None
    until: TimestampParam = None
    limit: limit_of(1000) = 100  # type: ignore[valid-type]
    cursor: CursorParam = None
    format: choice("json", "csv") = "json"  # type: ignore[valid-type]


@bp.get("/events")
@requires(Permission.READ)
@operation(
    operation_id="auditEvents",
    reply=AuditEvents,
    reply_description="a page",
    media={CSV: {"type": "string"}},
    query=AuditEventsQuery,
)
def events() -> Response:
    """The audit log, as JSON or (format=csv) as CSV with the next cursor in X-Next-Cursor.

    Audit events oldest first, filtered by model, type and time; paginated; JSON or CSV.

    In CSV, text cells a spreadsheet could read as formulas are prefixed with ``'``.
    """
    query = AuditEventsQuery.parse()
    output = query.format
    page = fetch_page(
        query,
        lambda cursor, limit: audit_service.list_events(
            db_session(),
            model=query.model,
            type=query.type,
            since=query.since,
            until=query.until,
            after_seq=cursor,
            limit=limit,
        ),
        seq=lambda event: event.seq,
    )
    next_cursor = page.next_cursor
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(_CSV_COLUMNS)
        writer.writerows([csv_cell(_csv_value(e, c)) for c in _CSV_COLUMNS] for e in page.rows)
        response = Response(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response.headers["Content-Disposition"] = 'attachment; filename="calmon-audit.csv"'
        response.headers["X-Content-Type-Options"] = "nosniff"
        if next_cursor:
            response.headers["X-Next-Cursor"] = next_cursor
        return response
    return reply(AuditEvents, {"events": page.rows, "next_cursor": next_cursor})


def _csv_value(event: StoredEvent, column: str) -> Any:
    """An event's value in a CSV column: the time as RFC 3339, the details as sorted JSON."""
    if column == "ts":
        return format_timestamp(event.ts)
    if column == "details":
        return json.dumps(event.details, sort_keys=True)
    return getattr(event, column)


class VerifyQuery(Query):
    """An anchor kept outside the database: the seq and sha256 of an event the chain must
    still hold (both or neither)."""

    expected_seq: Annotated[
        TextParam, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_SEQ})
    ] = None
    expected_sha256: Annotated[
        TextParam, WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})
    ] = None

    def anchor(self) -> Anchor | None:
        """The anchor, if given; 422 unless both parts are given and well formed."""
        return _anchor(self.expected_seq, self.expected_sha256)


def _anchor(seq_raw: str | None, sha_raw: str | None) -> Anchor | None:
    """``expected_seq`` and ``expected_sha256``, both or neither."""
    if seq_raw is None and sha_raw is None:
        return None
    errors = ErrorCollector()
    if seq_raw is None or not seq_raw.isascii() or not seq_raw.isdigit() or len(seq_raw) > 18:
        errors.add("expected_seq", "expected a positive integer (the anchored event's seq)")
    elif int(seq_raw) < 1:
        errors.add("expected_seq", "must be >= 1")
    if sha_raw is None or not _SHA256_HEX.match(sha_raw):
        errors.add("expected_sha256", "expected the anchored event's sha256 (64 lower-case hex)")
    errors.raise_if_any("invalid anchor: give expected_seq and expected_sha256 together")
    assert seq_raw is not None and sha_raw is not None
    return Anchor(int(seq_raw), sha_raw)


@bp.get("/verify")
@requires(Permission.READ)
@operation(
    operation_id="verifyAudit",
    reply=ChainVerification,
    reply_description="result",
    query=VerifyQuery,
)
def verify() -> Response:
    """Verify the audit log, its keyed head and every contract, gate decision and retirement against
    its event (and an anchor: expected_seq with expected_sha256).

    Walk the chain, check the keyed head (under a key) and every contract, gate decision and
    retirement against its event; report what was checked, the head, every problem (the first 100,
    and their count) and whether the anchor (``expected_seq`` with ``expected_sha256``), if given,
    is still on the chain.
    """
    anchor = VerifyQuery.parse().anchor()
    report = audit_service.verify_audit(
        db_session(), anchor, contracts=contracts_service.stored_contracts
    )
    return reply(ChainVerification, report)
