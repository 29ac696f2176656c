"""Query and path parameters: limits, cursors, NUL characters."""

from __future__ import annotations

import pytest
from flask import Flask

from service.common.errors import NotFound, ValidationFailed
from service.web.queries import check_text_arguments, cursor_arg, encode_cursor, limit_arg


@pytest.fixture
def app() -> Flask:
    return Flask(__name__)


@pytest.mark.parametrize("raw", ["%C2%B2", "%D9%A3", "0", "501", "-1", "1e2", "9" * 30])
def test_limit_is_ascii_digits_in_range(app: Flask, raw: str) -> None:
    with app.test_request_context(f"/?limit={raw}"), pytest.raises(ValidationFailed):
        limit_arg()


def test_cursors_stay_in_the_bigint_range(app: Flask) -> None:
    with app.test_request_context(f"/?cursor={encode_cursor(2**63 - 1)}"):
        assert cursor_arg() == 2**63 - 1
    for seq in (2**63, 10**23):
        with (
            app.test_request_context(f"/?cursor={encode_cursor(seq)}"),
            pytest.raises(ValidationFailed),
        ):
            cursor_arg()


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
