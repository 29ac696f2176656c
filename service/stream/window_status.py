"""The drift status of many windows of one slice at once: what a window reading
(``monitoring.calibration_reading``) gives for each, from one read of their buckets.

A history's strip asks for the status of the trailing window at every step's end: tens to
hundreds of overlapping windows. Each is decided as its reading decides it: the buckets that
tile it (``Window.tiling``), of the newest contract version with data in it, the status
detectors over those buckets in time order after the 24 hours before it (``monitoring.LOOKBACK``),
and the status rule (``drift.decide_statuses``) on its labeled count, its 95% ECE interval's
upper bound (each view's) and the detectors' values; but the buckets are read once for all the
windows and none of a reading's other measures is computed.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from service.calibration.drift import StatusLevels, decide_statuses
from service.calibration.ece_inference import infer_ece_many
from service.calibration.packing import unpack_fields
from service.calibration.readings import bins_inference
from service.calibration.sequential import detect
from service.calibration.series import step_views
from service.calibration.vocabulary import Status
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.stream import bucket_store
from service.stream.bucketing import layout_of
from service.stream.monitoring import LOOKBACK
from service.stream.windows import HOUR, RESOLUTION_FINE, RESOLUTION_HOUR, Window, floor_to

Buckets = list[bucket_store.BucketTotals]


class _Stored:
    """The slice's buckets of each resolution over a span, by start, for range lookups."""

    def __init__(self, by_resolution: dict[str, Buckets]) -> None:
        self.buckets = {
            r: sorted(b, key=lambda t: t.bucket_start) for r, b in by_resolution.items()
        }
        self.starts = {r: [t.bucket_start for t in b] for r, b in self.buckets.items()}

    def tiling(self, tiles: Sequence[tuple[str, datetime, datetime]]) -> Buckets:
        out: Buckets = []
        for resolution, start, end in tiles:
            starts = self.starts[resolution]
            lo, hi = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
            out.extend(self.buckets[resolution][lo:hi])
        return out


def statuses_of_windows(
    session: Session, model: str, slice_: str, windows: Sequence[Window]
) -> list[Status]:
    """The status a window reading of ``slice_`` gives for each of ``windows``, in order."""
    if not windows:
        return []
    first = floor_to(min(w.start for w in windows) - LOOKBACK, HOUR)
    last = max(w.end for w in windows)
    stored = _Stored(
        {
            resolution: bucket_store.window_totals(
                session, model, slice_, [(resolution, first, last)]
            )
            for resolution in (RESOLUTION_HOUR, RESOLUTION_FINE)
        }
    )
    contracts: dict[str, Contract | None] = {}

    def contract(contract_id: str) -> Contract | None:
        if contract_id not in contracts:
            contracts[contract_id] = contracts_store.get_contract(session, contract_id)
        return contracts[contract_id]

    statuses = [Status.INSUFFICIENT_DATA] * len(windows)
    chosen: dict[str, list[tuple[int, Buckets, Buckets]]] = defaultdict(list)
    for i, window in enumerate(windows):
        inside = stored.tiling(window.tiling())
        known = [c for t in inside if (c := contract(t.contract_id)) is not None]
        if not known:
            continue
        measured = max(known, key=lambda c: c.version)
        rows = [t for t in inside if t.contract_id == measured.id and t.stats is not None]
        before = Window.between(window.start - LOOKBACK, window.start).tiling()
        lookback = [
            t for t in stored.tiling(before) if t.contract_id == measured.id and t.stats is not None
        ]
        chosen[measured.id].append((i, rows, lookback))
    for contract_id, wanted in chosen.items():
        against = contracts[contract_id]
        assert against is not None
        for i, status in zip([i for i, _, _ in wanted], _decided(against, wanted), strict=True):
            statuses[i] = Status(status)
    return statuses


def _decided(contract: Contract, wanted: list[tuple[int, Buckets, Buckets]]) -> list[str]:
    """The statuses of windows measured against ``contract``: (index, its labeled buckets, the
    labeled buckets before it) each."""
    layout = layout_of(contract)
    policy = contract.policy
    levels = StatusLevels.of(policy, bins_inference(contract.baseline_reading().bins))
    sums = np.zeros((len(wanted), layout.size))
    alert, warn = np.zeros(len(wanted)), np.zeros(len(wanted))
    for k, (_, rows, lookback) in enumerate(wanted):
        if not rows:
            continue
        for t in rows:
            assert t.stats is not None
            sums[k] += t.stats
        ordered = [
            *sorted(lookback, key=lambda t: t.bucket_start),
            *sorted(rows, key=lambda t: t.bucket_start),
        ]
        fields = unpack_fields(np.stack([t.stats for t in ordered if t.stats is not None]), layout)
        views = [(view, len(lookback)) for view in step_views(fields, layout)]
        alert[k] = detect(views, levels.alert_design).value
        warn[k] = detect(views, levels.warn_design).value
    fields = unpack_fields(sums, layout)
    labeled = fields["n"].astype(np.int64)
    upper = np.full(len(wanted), -np.inf)
    for view in step_views(fields, layout):
        found = infer_ece_many(view.counts, view.confidence_sums, view.successes).upper
        upper = np.fmax(upper, found)
    return [str(s) for s in decide_statuses(labeled, upper, alert, warn, levels, policy)]
