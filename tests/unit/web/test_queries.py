"""Query and path parameters: limits, cursors, unknown names, NUL characters."""

from __future__ import annotations

import pytest
from flask import Flask

from service.common.errors import NotFound, ValidationFailed
from service.web.queries import (
    NoQuery,
    PageQuery,
    check_text_arguments,
    encode_cursor,
    fetch_page,
)


@pytest.fixture
def app() -> Flask:
    return Flask(__name__)


@pytest.mark.parametrize("raw", ["%C2%B2", "%D9%A3", "0", "501", "-1", "1e2", "+5", " 5", "9" * 30])
def test_limit_is_ascii_digits_in_range(app: Flask, raw: str) -> None:
    with app.test_request_context(f"/?limit={raw}"), pytest.raises(ValidationFailed) as refused:
        PageQuery.parse()
    assert [(d.field, d.message) for d in refused.value.details] == [("limit", "expected 1..500")]


def test_limit_takes_its_default_and_its_bounds(app: Flask) -> None:
    with app.test_request_context("/"):
        assert PageQuery.parse().limit == 50
    for raw in ("1", "500", "007"):
        with app.test_request_context(f"/?limit={raw}"):
            assert PageQuery.parse().limit == int(raw)


def test_cursors_stay_in_the_bigint_range(app: Flask) -> None:
    with app.test_request_context(f"/?cursor={encode_cursor(2**63 - 1)}"):
        assert PageQuery.parse().cursor == 2**63 - 1
    for seq in (2**63, 10**23):
        with (
            app.test_request_context(f"/?cursor={encode_cursor(seq)}"),
            pytest.raises(ValidationFailed),
        ):
            PageQuery.parse()


def test_every_unknown_and_invalid_parameter_is_named_in_one_refusal(app: Flask) -> None:
    with (
        app.test_request_context("/?limit=0&cursor=x&lmit=5&page=2"),
        pytest.raises(ValidationFailed) as refused,
    ):
        PageQuery.parse()
    fields = sorted(d.field for d in refused.value.details)
    assert fields == ["cursor", "limit", "lmit", "page"]
    unknown = [d.message for d in refused.value.details if d.field == "lmit"]
    assert unknown == ["unknown query parameter; this endpoint takes limit, cursor"]


def test_a_route_without_parameters_refuses_any(app: Flask) -> None:
    with app.test_request_context("/?x=1"), pytest.raises(ValidationFailed) as refused:
        NoQuery.parse()
    assert refused.value.details[0].message.endswith("this endpoint takes no parameters")


def test_nul_in_a_parameter_is_refused_before_any_query(app: Flask) -> None:
    @app.get("/things/<name>")
    def thing(name: str) -> str:
        return name

    with app.test_request_context("/things/a%00b"):
        with pytest.raises(NotFound) as missing:
            check_text_arguments()
        assert missing.value.details[0].field == "name"
    with app.test_request_context("/things/x?model=a%00b&ok=1"):
        with pytest.raises(ValidationFailed) as invalid:
            check_text_arguments()
        assert [d.field for d in invalid.value.details] == ["model"]


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 8])
def test_fetch_page_walks_a_listing_once_and_ends_without_an_empty_page(
    app: Flask, limit: int
) -> None:
    listing = [10, 20, 30, 40, 50, 60, 70]
    asked: list[int] = []

    def fetch(cursor: int | None, n: int) -> list[int]:
        asked.append(n)
        return [s for s in listing if cursor is None or s > cursor][:n]

    seen, sizes, cursor = [], [], None
    while True:
        query = f"/?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        with app.test_request_context(query):
            page = fetch_page(PageQuery.parse(), fetch, seq=lambda s: s)
        seen += page.rows
        sizes.append(len(page.rows))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == listing
    whole, rest = divmod(len(listing), limit)
    assert sizes == [limit] * whole + ([rest] if rest else [])
    assert set(asked) == {limit + 1}
