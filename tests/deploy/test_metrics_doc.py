"""docs/metrics.md lists every metric ``GET /metrics`` can serve, with its type and labels.

The label sets come from the code itself: the calibration gauges from an exposition rendered by
the collector, the live gauges from a live rendering, the counters and histograms from the
instruments' declared label names.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import ModuleType

from prometheus_client.metrics import MetricWrapperBase

from service.export import collector
from service.export import instruments as export_instruments
from service.export.reading_store import ExpositionTimes, ReadingRow
from service.stream import instruments as stream_instruments
from service.stream.fold_store import FoldStatus
from tests.deploy import ROOT

DOC = ROOT / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(calmon_[a-z0-9_]+)` \| (\w+) \|([a-z_, ]*)\| (.+) \|$")
SAMPLE = re.compile(r"^(calmon_[a-z0-9_]+?)(?:_bucket|_sum|_count|_created)?(?:\{(.*)\})? \S+$")


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """{metric: (type, label names)} from the tables of docs/metrics.md."""
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            name, kind, labels, meaning = match.groups()
            assert name not in rows, f"{name} is listed twice"
            assert meaning.strip(), f"{name} has no meaning"
            rows[name] = (kind, frozenset(x.strip() for x in labels.split(",") if x.strip()))
    return rows


def labels_in(text: str) -> dict[str, frozenset[str]]:
    """{family: label names} of the samples in an exposition (every sample of a family alike)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    seen: dict[str, frozenset[str]] = {name: frozenset() for name in types}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            names = frozenset(re.findall(r'(\w+)="', match.group(2) or ""))
            seen[match.group(1)] = names
    return seen


def exported_gauges() -> dict[str, tuple[str, frozenset[str]]]:
    """The gauges of an exposition with one reading of every stored value, plus the live ones."""
    now = datetime.now(UTC)
    values = {key: 0.5 for _, key, _ in collector.GAUGES} | {"policy_max_ece": 0.05}
    row = ReadingRow("m", "all", "24h", "c", 1, now, values)
    text = collector.render_readings([row], unexported=2).decode()
    times = ExpositionTimes(now - timedelta(seconds=5), ("m",), {})
    folds = {"m": FoldStatus(3, now - timedelta(seconds=40), now - timedelta(seconds=60))}
    text += collector.live_text(times, now, readable=True, folds=folds).decode()
    return {name: ("gauge", labels) for name, labels in labels_in(text).items()}


def instruments_of(module: ModuleType) -> dict[str, tuple[str, frozenset[str]]]:
    """{exported name: (type, label names)} of the prometheus-client metrics a module declares."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for value in vars(module).values():
        if isinstance(value, MetricWrapperBase):
            (family,) = value.describe()
            name = f"{family.name}_total" if family.type == "counter" else family.name
            out[name] = (family.type, frozenset(value._labelnames))
    return out


def test_every_exported_metric_is_documented_with_its_type_and_labels() -> None:
    code = (
        exported_gauges() | instruments_of(export_instruments) | instruments_of(stream_instruments)
    )
    docs = documented()
    assert len(code) >= 25, "the code's metrics were not all found"
    assert sorted(set(code) - set(docs)) == [], "exported but not in docs/metrics.md"
    assert sorted(set(docs) - set(code)) == [], "in docs/metrics.md but not exported"
    wrong = {name: (docs[name], code[name]) for name in code if docs[name] != code[name]}
    assert wrong == {}, "documented (type, labels) differ from the code's"
