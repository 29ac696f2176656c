"""The stream's rows column by column: a batch of new predictions as the stream's SQL
(``service.stream.sql``) stores it, and stored predictions with their labels as that SQL returns
them, the fold's queue carries them and the buckets count them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LabeledRows:
    """Stored predictions with their labels, column by column (R rows): what the labels add to
    their predictions' buckets. A label request's statement returns them, the fold's queue
    carries them, and a bucket rebuild reads them a page at a time.

    ``ids`` are the predictions' (and their labels') ids and ``contract_ids`` the contracts the
    predictions are bound to; ``seconds`` each prediction's event time in whole seconds since
    the epoch (int64), ``slices`` its stored JSON slice list and ``inputs`` its stored bytes.
    ``labels`` are the labels' class indices (int64; -1 for a prediction without a label, in a
    rebuild), provisional for a label sent by name until its prediction's contract has read it;
    ``names`` the class names the labels were sent with (None for a label sent as an index, or
    whose index is final). ``label_seconds`` are the labels' own event times in whole seconds
    since the epoch (int64) where the statement read them (a label request), else None.
    """

    ids: list[str]
    contract_ids: list[str]
    seconds: np.ndarray
    slices: list[str]
    inputs: list[bytes]
    labels: np.ndarray
    names: list[str | None]
    label_seconds: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[Any]]) -> LabeledRows:
        """From rows ``(id, contract id, seconds, slices, inputs, label, name)``, as a
        statement returns them (``inputs`` any bytes-like value)."""
        columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * 7
        ids, contract_ids, seconds, slices, inputs, labels, names = columns
        return cls(
            ids=list(ids),
            contract_ids=list(contract_ids),
            seconds=np.array(seconds, dtype=np.int64),
            slices=list(slices),
            inputs=[bytes(b) for b in inputs],
            labels=np.array(labels, dtype=np.int64),
            names=list(names),
        )

    def label_delays(self) -> np.ndarray:
        """Seconds from each prediction's event time to its label's (int64, whole seconds);
        only where the labels' event times were read."""
        if self.label_seconds is None:
            raise ValueError("the labels' event times were not read")
        return self.label_seconds - self.seconds

    def take(self, rows: Sequence[int]) -> LabeledRows:
        """The rows ``rows`` only, in that order."""
        at = np.asarray(rows, dtype=np.int64)
        return LabeledRows(
            ids=[self.ids[r] for r in rows],
            contract_ids=[self.contract_ids[r] for r in rows],
            seconds=self.seconds[at],
            slices=[self.slices[r] for r in rows],
            inputs=[self.inputs[r] for r in rows],
            labels=self.labels[at],
            names=[self.names[r] for r in rows],
            label_seconds=None if self.label_seconds is None else self.label_seconds[at],
        )


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
