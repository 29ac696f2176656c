"""The columns the stream's backend-specific SQL (``service.stream.sql``) takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np


@dataclass(frozen=True)
class RecordedLabels:
    """The labels one statement inserted, column by column.

    The first seven lists describe the J labels joined to their stored prediction, in one order:
    ``labels`` are the stored class indices, ``label_seconds`` and ``seconds`` whole seconds
    since the epoch of the label's and of the prediction's event time, ``slices`` the
    prediction's stored JSON slice list and ``inputs`` its stored bytes. ``waiting`` holds the
    ids of the labels inserted without their prediction.
    """

    ids: list[str]
    labels: list[int]
    label_seconds: list[int]
    contract_ids: list[str]
    seconds: list[int]
    slices: list[str]
    inputs: list[bytes]
    waiting: list[str]


@dataclass(frozen=True)
class PredictionColumns:
    """A validated batch of new predictions, column by column (N rows, in id order).

    ``ts`` are aware datetimes, ``cohorts`` each row's canonical cohort JSON text, ``slices``
    its JSON list of slices, ``inputs`` (N, W) little-endian float64: row ``i``'s stored bytes
    are ``inputs[i].tobytes()``.
    """

    ids: list[str]
    ts: list[datetime]
    cohorts: list[str]
    slices: list[str]
    inputs: np.ndarray

    def rows(self) -> list[tuple[str, datetime, str, str, bytes]]:
        """Row by row, in the column order of the ``stage_predictions`` staging table."""
        stored = [row.tobytes() for row in self.inputs]
        return list(zip(self.ids, self.ts, self.cohorts, self.slices, stored, strict=True))
