"""The metric names the deployment files may use are those the code exports.

``tests/deploy/__init__.py`` lists them by hand (so that a misspelt name in a rule, a rule test
or a panel fails); these checks keep that list equal to what ``GET /metrics`` can serve.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import ModuleType

from prometheus_client.metrics import MetricWrapperBase

from service.export import collector
from service.export import instruments as export_instruments
from service.stream import instruments as stream_instruments
from tests.deploy import COUNTERS, GAUGES, HISTOGRAMS, SERVICE_GAUGES


def families_of(module: ModuleType) -> dict[str, str]:
    """{family name: type} of the prometheus-client metrics a module declares."""
    return {
        family.name: family.type
        for value in vars(module).values()
        if isinstance(value, MetricWrapperBase)
        for family in value.describe()
    }


def test_calibration_gauges_are_the_collector_families() -> None:
    assert {name for name, _ in collector.FAMILIES} == GAUGES


def test_service_gauges_are_the_live_samples() -> None:
    text = collector.live_text(None, datetime.now(UTC), readable=True).decode()
    assert set(re.findall(r"^# TYPE (\S+) gauge$", text, re.MULTILINE)) == SERVICE_GAUGES


def test_counters_and_histograms_are_the_declared_instruments() -> None:
    families = families_of(export_instruments) | families_of(stream_instruments)
    counters = {f"{name}_total" for name, kind in families.items() if kind == "counter"}
    histograms = {name for name, kind in families.items() if kind == "histogram"}
    assert counters == COUNTERS
    assert histograms == HISTOGRAMS
    assert set(families.values()) == {"counter", "histogram"}
