"""Validation at the edges: text, numbers, timestamps, batches, bodies, query parameters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from flask import Flask

from service.calibration import CalibrationInputError
from service.calibration._checks import MAX_ABS_LOGIT, finite_number, float_array
from service.calibration.calibrators import (
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    check_bounds,
)
from service.calibration.fitting import T_MAX, T_MIN
from service.calibration.stats import multiclass_stats
from service.common.errors import ErrorCollector, NotFound, ValidationFailed
from service.common.values import (
    NAME_PATTERN,
    expect_int,
    expect_number,
    expect_str,
    expect_timestamp,
    text_problem,
)
from service.contracts.labeled_sets import parse_inputs
from service.stream.batches import parse_labels, parse_predictions
from service.stream.windows import Window, WindowError, parse_duration
from service.web.bodies import json_body
from service.web.http_errors import ApiError
from service.web.queries import check_text_arguments, cursor_arg, encode_cursor, limit_arg

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def fields_of(errors: ErrorCollector) -> list[tuple[str, str]]:
    return [(d.field, d.message) for d in errors.details]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("plain", None),
        ("ünïcødé 😀", None),
        ("a\nb", None),
        ("a\x00b", "contains a NUL character"),
        ("a\ud800b", "contains a lone surrogate: not valid Unicode"),
        ("\udfff", "contains a lone surrogate: not valid Unicode"),
    ],
)
def test_text_problem(text: str, problem: str | None) -> None:
    assert text_problem(text) == problem


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("glyphs", True),
        ("glyphs\n", False),
        ("glyphs\nx", False),
        ("a" * 200, True),
        ("a" * 201, False),
    ],
)
def test_names_match_whole(value: str, valid: bool) -> None:
    errors = ErrorCollector()
    assert (
        expect_str(value, "model", errors, max_length=300, pattern=NAME_PATTERN) is not None
    ) == valid
    assert bool(errors) != valid


def test_strings_refuse_invalid_text_naming_the_field() -> None:
    errors = ErrorCollector()
    assert expect_str("a\ud800", "population", errors) is None
    assert expect_str("a\x00", "reason", errors, item=3) is None
    assert fields_of(errors) == [
        ("population", "contains a lone surrogate: not valid Unicode"),
        ("reason", "contains a NUL character"),
    ]
    assert errors.details[1].item == 3


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan")])
def test_numbers_beyond_float64_are_not_finite(value: Any) -> None:
    errors = ErrorCollector()
    assert expect_number(value, "policy.max_ece", errors, minimum=0, maximum=1) is None
    assert fields_of(errors) == [("policy.max_ece", "must be finite")]
    with pytest.raises(CalibrationInputError, match="finite"):
        finite_number(value, "calibrator.temperature")


def test_huge_integers_are_refused_without_overflow() -> None:
    with pytest.raises(CalibrationInputError):
        float_array([10**400, 1.0], "logits", 1)
    errors = ErrorCollector()
    assert expect_int(2**53 - 1, "n", errors, minimum=0) == 2**53 - 1
    assert expect_int(2**53, "n", errors, minimum=0) is None
    assert expect_int(-(10**400), "n", errors) is None
    assert [field for field, _ in fields_of(errors)] == ["n", "n"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-11-30T11:00:00Z", None),
        ("2000-01-01T00:00:00Z", None),
        ("2026-12-01T11:59:59Z", None),
        ("1999-12-31T23:59:59Z", "must not be before 2000-01-01T00:00:00.000000Z"),
        ("0001-01-01T00:00:00Z", "must not be before 2000-01-01T00:00:00.000000Z"),
        ("0001-01-01T00:00:00+01:00", "expected an RFC 3339 timestamp"),
        ("2026-12-01T12:00:01Z", "must not be more than 1 day after"),
        ("9999-12-31T23:59:59Z", "must not be more than 1 day after"),
        ("9999-12-31T23:59:59-01:00", "expected an RFC 3339 timestamp"),
        ("2026-11-30T11:00:00Z\n", "expected an RFC 3339 timestamp"),
        ("\uff12\uff10\uff12\uff16-11-30T11:00:00Z", "expected an RFC 3339 timestamp"),
    ],
)
def test_timestamps_lie_in_the_range_around_receipt(text: str, message: str | None) -> None:
    errors = ErrorCollector()
    parsed = expect_timestamp(text, "data_window.start", errors, now=NOW)
    assert (parsed is None) == (message is not None)
    if message is not None:
        ((field, got),) = fields_of(errors)
        assert field == "data_window.start" and got.startswith(message)


def _prediction(**fields: Any) -> dict[str, Any]:
    return {"id": "p", "ts": "2026-11-30T11:00:00Z", "logits": [1.0, 2.0, 3.0], **fields}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (_prediction(cohort={"k": {"n": 1}}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k": ["a"]}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k": "a\ud800"}), "predictions[1].cohort.k"),
        (_prediction(cohort={"k\n": "v"}), "predictions[1].cohort.k\\n"),
        (_prediction(id="a\ud800"), "predictions[1].id"),
        (_prediction(logits=[MAX_ABS_LOGIT * 1.01, 0, 0]), "predictions[1].logits"),
        (_prediction(logits=[10**400, 0, 0]), "predictions[1].logits"),
        (_prediction(ts="9999-12-31T23:59:59Z"), "predictions[1].ts"),
    ],
)
def test_a_bad_prediction_is_named_with_its_index(item: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_predictions([_prediction(), item], task="multiclass", n_classes=3, now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [(field, 1)]


def test_the_fast_path_takes_clean_batches_at_the_logit_bound() -> None:
    items = [
        _prediction(id=f"p{i}", cohort={"k": "v"}, logits=[MAX_ABS_LOGIT, -MAX_ABS_LOGIT, 0])
        for i in range(3)
    ]
    batch = parse_predictions(items, task="multiclass", n_classes=3, now=NOW)
    assert batch.inputs.shape == (3, 3) and batch.cohorts[0] == {"k": "v"}


def test_labels_refuse_timestamps_out_of_range() -> None:
    items = [
        {"id": "a", "label": 0, "ts": "2026-11-30T11:00:00Z"},
        {"id": "b", "label": "b", "ts": "0001-01-01T00:00:00Z"},
    ]
    with pytest.raises(ValidationFailed) as info:
        parse_labels(items, classes=["a", "b"], now=NOW)
    assert [(d.field, d.item) for d in info.value.details] == [("labels[1].ts", 1)]


def test_labeled_sets_bound_logits_and_name_the_row() -> None:
    errors = ErrorCollector()
    rows = [[0.0, 1.0], [2e6, 0.0]]
    assert parse_inputs(rows, "fit.logits", task="multiclass", n_classes=2, errors=errors) is None
    assert [field for field, _ in fields_of(errors)] == ["fit.logits[1]"]


def test_the_logit_bound_keeps_statistics_finite_at_the_smallest_temperature() -> None:
    z = np.array([[MAX_ABS_LOGIT, -MAX_ABS_LOGIT] + [-MAX_ABS_LOGIT] * 998] * 4)
    stats = multiclass_stats(
        z, np.array([1, 1, 2, 3]), np.linspace(0, 1, 101), calibrator=TemperatureCalibrator(T_MIN)
    )
    assert np.isfinite(stats.nll_sum) and stats.nll_sum == pytest.approx(4 * 2e6 / T_MIN, rel=1e-6)


@pytest.mark.parametrize(
    ("calibrator", "field"),
    [
        (TemperatureCalibrator(T_MIN), None),
        (TemperatureCalibrator(T_MAX), None),
        (TemperatureCalibrator(T_MIN * 0.99), "calibrator.temperature"),
        (TemperatureCalibrator(T_MAX * 1.01), "calibrator.temperature"),
        (PlattCalibrator(1e6, 1e8), None),
        (PlattCalibrator(2e6, 0.0), "calibrator.slope"),
        (PlattCalibrator(1e-7, 0.0), "calibrator.slope"),
        (PlattCalibrator(1.0, -1.1e8), "calibrator.intercept"),
        (IdentityCalibrator(), None),
    ],
)
def test_calibrator_bounds(calibrator: Any, field: str | None) -> None:
    if field is None:
        check_bounds(calibrator)
    else:
        with pytest.raises(CalibrationInputError) as info:
            check_bounds(calibrator)
        assert info.value.field == field


@pytest.mark.parametrize("text", ["24h\n", "1h ", "٣h", "0h", "1.5h", "401d"])
def test_durations_match_whole(text: str) -> None:
    with pytest.raises(WindowError):
        parse_duration(text)


def test_a_window_at_the_end_of_the_calendar_is_an_error_not_an_overflow() -> None:
    end = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    with pytest.raises(WindowError):
        Window.between(end - timedelta(hours=1), end)


@pytest.fixture
def app() -> Flask:
    return Flask(__name__)


def _json(app: Flask, raw: bytes) -> Any:
    with app.test_request_context(
        "/", method="POST", data=raw, headers={"Content-Type": "application/json"}
    ):
        return json_body()


def test_bodies_name_nan_tokens_with_a_400(app: Flask) -> None:
    with pytest.raises(ApiError) as info:
        _json(app, b'{"predictions": [{"logits": [1, NaN]}, {"score": -Infinity}]}')
    assert info.value.status == 400
    assert [(d["field"], d.get("item")) for d in info.value.details] == [
        ("predictions[0].logits[1]", 0),
        ("predictions[1].score", 1),
    ]


def test_bodies_name_every_string_that_is_not_text(app: Flask) -> None:
    raw = b'{"model": "a\\u0000", "x": {"\\ud800": "ok", "y": ["\\udc00"]}, "z": "\\ud83d\\ude00"}'
    with pytest.raises(ApiError) as info:
        _json(app, raw)
    assert info.value.status == 422
    assert [d["field"] for d in info.value.details] == ["model", "x.\\ud800", "x.y[0]"]


def test_numbers_beyond_float64_reach_validation_as_infinities(app: Flask) -> None:
    raw = ('{"a": 1' + "0" * 400 + ', "b": 1e400, "c": 18446744073709551616, "d": 3}').encode()
    body = _json(app, raw)
    assert body["a"] == body["b"] == float("inf")
    assert body["c"] == float(2**64) and isinstance(body["d"], int)


def test_a_clean_body_with_escaped_emoji_passes(app: Flask) -> None:
    assert _json(app, b'{"a": "\\ud83d\\ude00", "b": "\\\\u0000"}') == {"a": "😀", "b": "\\u0000"}


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


def test_json_round_trip_of_the_error_details_keeps_them_ascii(app: Flask) -> None:
    with pytest.raises(ApiError) as info:
        _json(app, b'{"\\u0000k": 1}')
    assert json.dumps(info.value.details, ensure_ascii=True)
    assert info.value.details[0]["field"] == "\\x00k"
