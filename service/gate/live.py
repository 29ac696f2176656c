"""The gate's look at production: ``policy.max_live_status``.

The other checks judge held-out evidence; this one judges what the exporter holds now. Every
slice of the model (a cohort in a window) has one stored reading, the one served on
``/metrics``, the fleet page and ``GET /v1/models``, with its drift status and the reasons for
it, as of the last refresh (``computed_at``). With ``max_live_status`` set to ``warn`` or
``alert``, the check ``live_status`` fails when any of those slices has that status or a worse
one; the evidence lists every such slice with its reasons and when it was computed, so the
decision records what production looked like at its time (a later refresh does not change it).
Off by default: the gate then does not read the stored readings at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.calibration.vocabulary import Status, severity_of
from service.common.values import format_timestamp
from service.db.models import StoredReading

#: The statuses ``max_live_status`` may name.
LIVE_STATUSES = (Status.WARN, Status.ALERT)
#: Slices a failing message names (the evidence lists them all).
_NAMED = 10


@dataclass(frozen=True)
class LiveSlice:
    """One exported slice's stored reading: cohort (``all`` or ``key=value,...``), window, drift
    status with its reasons, when it was computed (UTC) and under which contract version."""

    cohort: str
    window: str
    status: str
    reasons: tuple[str, ...]
    computed_at: datetime
    contract_id: str
    contract_version: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "cohort": self.cohort,
            "window": self.window,
            "status": self.status,
            "reasons": list(self.reasons),
            "computed_at": format_timestamp(self.computed_at),
            "contract_id": self.contract_id,
            "contract_version": self.contract_version,
        }


def live_slices(session: Session, model: str) -> tuple[LiveSlice, ...]:
    """Every stored reading of ``model``, by cohort and window."""
    rows = session.scalars(
        select(StoredReading)
        .where(StoredReading.model == model)
        .order_by(StoredReading.cohort, StoredReading.window)
    )
    return tuple(
        LiveSlice(
            cohort=r.cohort,
            window=r.window,
            status=str(r.values.get("status", Status.INSUFFICIENT_DATA)),
            reasons=tuple(str(reason) for reason in r.values.get("reasons") or ()),
            computed_at=r.computed_at,
            contract_id=r.contract_id,
            contract_version=r.contract_version,
        )
        for r in rows
    )


@dataclass(frozen=True)
class LiveVerdict:
    """The ``live_status`` check: passed, the offending slices (observed) and its message."""

    passed: bool
    observed: list[dict[str, Any]]
    message: str


def judge_live(slices: Sequence[LiveSlice], max_status: str) -> LiveVerdict:
    """Fail when a slice's status is ``max_status`` or worse; the slices worst first."""
    limit = Status(max_status).severity
    hit = [s for s in slices if severity_of(s.status) >= limit]
    hit.sort(key=lambda s: (-severity_of(s.status), s.cohort, s.window))
    observed = [s.to_dict() for s in hit]
    if not slices:
        return LiveVerdict(
            True, observed, "no exported reading of the model yet: nothing live to judge"
        )
    if not hit:
        return LiveVerdict(
            True,
            observed,
            f"none of the {len(slices)} exported slices is at {max_status} or worse now",
        )
    named = ", ".join(f"{s.cohort} in {s.window} ({s.status})" for s in hit[:_NAMED])
    if len(hit) > _NAMED:
        named += f" and {len(hit) - _NAMED} more"
    first = hit[0]
    why = "; ".join(first.reasons) or "no reason recorded"
    return LiveVerdict(
        False,
        observed,
        f"{len(hit)} of {len(slices)} exported slices are at {max_status} or worse now: "
        f"{named}; {first.cohort} in {first.window} because {why}",
    )
