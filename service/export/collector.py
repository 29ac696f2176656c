"""The calibration gauges: rendered from the stored readings once per refresh.

prometheus-client renders about 22,500 samples (500 slices x 3 windows x 15 gauges) in a quarter
of a second, too slow to repeat on every scrape; the refresher renders them once with
``render_readings`` and stores the text next to the readings, and a scrape serves the stored text
(the same bytes in every worker and replica) plus a few live samples from ``ExpositionCollector``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.export.reading_store import ReadingRow

LABELS = ["model", "contract_version", "cohort", "window"]

#: (metric name, key in the stored values, help text). Ratios are in 0..1.
GAUGES = (
    ("calmon_ece", "ece", "Plug-in expected calibration error of labeled predictions (0..1)."),
    (
        "calmon_ece_debiased",
        "ece_debiased",
        "Debiased (median-unbiased) estimate of the true binned ECE (0..1).",
    ),
    ("calmon_ece_ci_lower", "ece_ci_lower", "Lower bound of the true ECE's 95% interval."),
    ("calmon_ece_ci_upper", "ece_ci_upper", "Upper bound of the true ECE's 95% interval."),
    ("calmon_nll", "nll", "Mean negative log-likelihood (natural log) of labeled predictions."),
    ("calmon_brier", "brier", "Mean Brier score (multiclass 0..2, binary 0..1)."),
    ("calmon_accuracy", "accuracy", "Accuracy of labeled predictions (0..1)."),
    ("calmon_mean_confidence", "mean_confidence", "Mean confidence of labeled predictions."),
    ("calmon_predictions", "predictions", "Predictions in the window."),
    ("calmon_labeled_predictions", "labeled_predictions", "Labeled predictions in the window."),
    ("calmon_label_coverage", "label_coverage", "Share of the window's predictions labeled."),
    ("calmon_ece_delta", "ece_delta", "ECE minus the contract's held-out baseline ECE."),
    (
        "calmon_refit_temperature",
        "refit_temperature",
        "Extra temperature minimising NLL on the window (1: no drift; > 1: over-confident).",
    ),
    (
        "calmon_confidence_psi",
        "confidence_psi",
        "Population stability index of the window's confidence-bin counts (labeled or not)"
        " against the baseline's.",
    ),
    (
        "calmon_expected_accuracy",
        "expected_accuracy",
        "Accuracy the calibrated model expects of its still-unlabeled predictions.",
    ),
    (
        "calmon_drift_status",
        "drift_status",
        "Drift status: -1 insufficient_data, 0 ok, 1 warn, 2 alert.",
    ),
)


class ReadingsCollector(Collector):
    """Gauge families of a set of stored readings, one series per (model, version, cohort,
    window), plus each contract version's ``calmon_policy_max_ece``."""

    def __init__(self, rows: Iterable[ReadingRow]) -> None:
        self.rows = list(rows)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {key: GaugeMetricFamily(name, doc, labels=LABELS) for name, key, doc in GAUGES}
        policy = GaugeMetricFamily(
            "calmon_policy_max_ece",
            "The contract policy's max_ece threshold.",
            labels=["model", "contract_version"],
        )
        policies: dict[tuple[str, str], float] = {}
        for row in self.rows:
            version = str(row.contract_version)
            labels = [row.model, version, row.cohort, row.window]
            for _, key, _ in GAUGES:
                value = row.values.get(key)
                if value is not None:
                    families[key].add_metric(labels, float(value))
            if row.values.get("policy_max_ece") is not None:
                policies[(row.model, version)] = float(row.values["policy_max_ece"])
        for (model, version), value in sorted(policies.items()):
            policy.add_metric([model, version], value)
        yield from families.values()
        yield policy


def render_readings(rows: Iterable[ReadingRow]) -> bytes:
    """The Prometheus text exposition of the calibration gauges of ``rows``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReadingsCollector(rows))
    return generate_latest(registry)


class ExpositionCollector(Collector):
    """Live samples about the stored readings: whether they could be read, and their age.

    ``models`` maps each model to when its first contract was registered and when its stored
    readings were computed (``service.export.reading_store.readings_times``); ``exposition_at`` is
    when the served exposition was rendered.
    """

    def __init__(
        self,
        exposition_at: datetime | None,
        now: datetime,
        readable: bool,
        models: Mapping[str, tuple[datetime, datetime | None]] | None = None,
    ) -> None:
        self.exposition_at, self.now, self.readable = exposition_at, now, readable
        self.models = dict(models or {})

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "calmon_exporter_up",
            "1 when the stored readings could be read.",
            value=1 if self.readable else 0,
        )
        if not self.readable:
            return
        ages = GaugeMetricFamily(
            "calmon_readings_age_seconds",
            "Seconds since the model's served readings were computed (since its first contract"
            " while it has none); grows while its refresh fails.",
            labels=["model"],
        )
        for model, (registered, computed) in sorted(self.models.items()):
            ages.add_metric(
                [model], (self.now - self.served_since(registered, computed)).total_seconds()
            )
        yield ages

    def served_since(self, registered: datetime, computed: datetime | None) -> datetime:
        """When the readings served for a model were computed, at the latest.

        The served exposition holds the readings stored when it was rendered, so they are no
        newer than either time; a model without readings in it counts from its registration.
        """
        if computed is None or self.exposition_at is None:
            return registered
        return min(computed, self.exposition_at)
