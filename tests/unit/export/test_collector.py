"""The stored exposition: fragments rendered per model read as prometheus-client writes them."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from service.export.collector import GAUGES, assemble, model_fragment, render_readings
from service.export.reading_store import ReadingRow

NOW = datetime(2026, 12, 1, tzinfo=UTC)
VALUES = {"ece": 0.125, "predictions": 40, "drift_status": -1, "policy_max_ece": 0.05}


def rows(model: str) -> list[ReadingRow]:
    return [
        ReadingRow(model, cohort, window, "c", 2, NOW, dict(VALUES))
        for cohort in ("all", 'odd="key"=x\\y')
        for window in ("1h", "24h")
    ]


def client_lines(readings: list[ReadingRow]) -> list[str]:
    """The sample lines prometheus-client writes for the same gauges."""

    class Readings:
        def collect(self):  # type: ignore[no-untyped-def]
            labels = ["model", "contract_version", "cohort", "window"]
            for name, key, doc in GAUGES:
                family = GaugeMetricFamily(name, doc, labels=labels)
                for r in readings:
                    if r.values.get(key) is not None:
                        family.add_metric(
                            [r.model, str(r.contract_version), r.cohort, r.window],
                            float(r.values[key]),
                        )
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Readings())  # type: ignore[arg-type]
    return generate_latest(registry).decode().splitlines()


def test_fragments_write_samples_and_headers_as_prometheus_client_does() -> None:
    readings = rows("m-1") + rows("m-2")
    ours = render_readings(readings).decode().splitlines()
    theirs = client_lines(readings)
    gauge_part = ours[
        : ours.index("# HELP calmon_policy_max_ece The contract policy's max_ece threshold.")
    ]
    assert gauge_part == theirs
    assert 'calmon_policy_max_ece{contract_version="2",model="m-1"} 0.05' in ours
    assert 'calmon_slices_unexported{model="m-2"} 0.0' in ours


def test_the_exposition_is_the_fragments_grouped_by_family() -> None:
    first, second = model_fragment("a", rows("a"), 0), model_fragment("b", rows("b"), 3)
    text = assemble([first, second]).decode()
    assert text == render_readings(rows("a") + rows("b"), 0).decode().replace(
        'calmon_slices_unexported{model="b"} 0.0', 'calmon_slices_unexported{model="b"} 3.0'
    )
    ece = [line for line in text.splitlines() if line.startswith("calmon_ece{")]
    assert [line.split('model="')[1][0] for line in ece] == ["a"] * 4 + ["b"] * 4
