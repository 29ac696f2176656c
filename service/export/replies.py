"""The reply of the fleet listing (``GET /v1/models``): the fleet page's facts per model."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from service.common.replies import Count, Listed, Reply
from service.stream.replies import StatusText


class WindowSummary(Reply):
    """A model's stored state in one window."""

    window: str
    status: StatusText = Field(description="the worst status of the model's slices in the window")
    labeled_predictions: Count = Field(description="labeled predictions of the all slice")
    predictions: Count = Field(description="predictions of the all slice")


class ModelSummary(Reply):
    """One model: its worst stored status, its current contract and its state per window."""

    model: str
    status: StatusText | None = Field(
        description="the worst status over every slice and window; null before the first refresh"
    )
    contract_id: str
    contract_version: int = Field(ge=1)
    windows: Annotated[list[WindowSummary], Listed] = Field(
        description="in the refresher's order; a window without a stored reading is left out"
    )
    waiting_labels: Count = Field(description="labels waiting for their prediction")


class ModelList(Reply):
    """A page of models, worst status first (then by name); ``next_cursor`` is null on the last
    page."""

    models: list[ModelSummary]
    next_cursor: str | None
