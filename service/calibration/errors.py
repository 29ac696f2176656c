"""Exceptions raised by the calibration core.

Both carry the name of the offending input in ``field`` (dotted, e.g. ``"calibrator.temperature"``
or ``"labels"``) so the HTTP layer can place the message in its error ``details``.
"""

from __future__ import annotations


class CalibrationInputError(ValueError):
    """An input that the calibration core refuses: wrong shape, non-finite, out of range."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class FitError(CalibrationInputError):
    """A fit that cannot be done on the given data (one class only, no finite optimum, ...)."""
