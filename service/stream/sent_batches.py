"""A batch as it was sent, JSON items or Arrow columns, read as columns against a contract.

Both ingest routes take their batch as JSON (``{"model", "contract_id"?, items_key: [...]}``)
or as an Arrow IPC stream whose envelope comes as query parameters. ``SentBatch`` holds the
envelope, checked by the same declaration either way (``batch_bodies.parse_envelope``), and the
rows as sent; once the contract is known, ``predictions`` and ``labels`` give the validated
columns (``batch_columns`` or ``arrow_batches`` read them, ``column_checks`` checks them),
whichever form the rows came in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from service.stream.arrow_batches import labels_from_arrow, predictions_from_arrow
from service.stream.batch_bodies import MAX_BATCH_ITEMS, parse_envelope
from service.stream.batch_columns import (
    LabelBatch,
    PredictionBatch,
    parse_labels,
    parse_predictions,
)


@dataclass(frozen=True)
class SentBatch:
    """A batch's envelope and its rows: JSON ``items`` or an Arrow ``table``."""

    model: str
    contract_id: str | None
    items: list[Any] | None = None
    table: pa.Table | None = None

    @classmethod
    def of_json(cls, body: Mapping[str, Any], items_key: str) -> SentBatch:
        """A decoded JSON body, its envelope checked; ``ValidationFailed`` naming each
        problem."""
        envelope = parse_envelope(body, items_key, MAX_BATCH_ITEMS)
        return cls(envelope.model, envelope.contract_id, envelope.items)

    @classmethod
    def of_arrow(
        cls, model: str | None, contract_id: str | None, items_key: str, table: pa.Table
    ) -> SentBatch:
        """An Arrow body's table, with the envelope its query parameters stand for, checked by
        the rules of a JSON envelope (its items are checked apart)."""
        body: dict[str, Any] = {items_key: [None]}
        if model is not None:
            body["model"] = model
        if contract_id is not None:
            body["contract_id"] = contract_id
        envelope = parse_envelope(body, items_key)
        return cls(envelope.model, envelope.contract_id, table=table)

    def predictions(self, *, task: str, n_classes: int, now: datetime) -> PredictionBatch:
        """The rows validated as predictions of a contract of ``task`` and ``n_classes``, at the
        time of receipt ``now``; ``ValidationFailed`` naming each bad item and field."""
        if self.table is not None:
            return predictions_from_arrow(self.table, task=task, n_classes=n_classes, now=now)
        assert self.items is not None
        return parse_predictions(self.items, task=task, n_classes=n_classes, now=now)

    def labels(self, *, index_of: Mapping[str, int], n_classes: int, now: datetime) -> LabelBatch:
        """The rows validated as labels some contract version of the model knows
        (``label_classes.known_labels``); ``ValidationFailed`` naming each bad item and field."""
        if self.table is not None:
            return labels_from_arrow(self.table, index_of=index_of, n_classes=n_classes, now=now)
        assert self.items is not None
        return parse_labels(self.items, index_of=index_of, n_classes=n_classes, now=now)
