"""The calibration gauges: rendered by the refresher, served as stored text.

Each model's samples are rendered once, when its readings change, into a *fragment*: one text
of sample lines per metric family (``FAMILIES``), stored with the model's refresh state. The
exposition is the families' ``HELP``/``TYPE`` headers, each followed by every model's lines of
that family (``assemble``), so storing it when little changed costs a concatenation, not a
rendering of the fleet. A scrape serves the stored text (the same bytes in every worker and
replica) plus a few live samples (``live_text``). Numbers and label sets are written as
prometheus-client writes them (label names sorted); label values are escaped as the text format
requires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from prometheus_client.utils import floatToGoString

from service.export.reading_store import ExpositionTimes, ReadingRow
from service.stream.fold_store import FoldStatus

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


#: The families of a model's fragment, in exposition order: (name, help text).
FAMILIES = (
    *((name, doc) for name, _, doc in GAUGES),
    ("calmon_policy_max_ece", "The contract policy's max_ece threshold."),
    (
        "calmon_slices_unexported",
        "Cohort slices of the model with no series here: beyond its series budget"
        " (CALMON_MAX_SLICES_PER_MODEL slices are exported: all, then the slices with the most"
        " labeled predictions). Their readings are served by"
        " GET /v1/models/{model}/calibration?cohort=key=value.",
    ),
)
_POLICY = len(GAUGES)
_UNEXPORTED = _POLICY + 1


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    """A sample's label set, names in sorted order as prometheus-client writes them."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs)) + "}"


def model_fragment(model: str, rows: Iterable[ReadingRow], unexported: int) -> list[str]:
    """One model's sample lines, one text per family of ``FAMILIES`` (rows in the given order,
    one series per (contract version, cohort, window), plus each contract version's
    ``calmon_policy_max_ece`` and the count of unexported slices)."""
    parts: list[list[str]] = [[] for _ in FAMILIES]
    policies: dict[str, float] = {}
    for row in rows:
        version = str(row.contract_version)
        pairs = (("model", model), ("contract_version", version))
        labels = _labels((*pairs, ("cohort", row.cohort), ("window", row.window)))
        for i, (name, key, _) in enumerate(GAUGES):
            value = row.values.get(key)
            if value is not None:
                parts[i].append(f"{name}{labels} {floatToGoString(float(value))}\n")
        if row.values.get("policy_max_ece") is not None:
            policies[version] = float(row.values["policy_max_ece"])
    for version, value in sorted(policies.items()):
        labels = _labels((("model", model), ("contract_version", version)))
        parts[_POLICY].append(f"calmon_policy_max_ece{labels} {floatToGoString(value)}\n")
    parts[_UNEXPORTED].append(
        f"calmon_slices_unexported{_labels((('model', model),))} {floatToGoString(unexported)}\n"
    )
    return ["".join(p) for p in parts]


def _header(name: str, doc: str) -> str:
    help_text = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


def assemble(fragments: Iterable[Sequence[str]]) -> bytes:
    """The exposition of the calibration gauges from the models' fragments (in their order)."""
    frags = list(fragments)
    out: list[str] = []
    for i, (name, doc) in enumerate(FAMILIES):
        out.append(_header(name, doc))
        out.extend(f[i] for f in frags if i < len(f))
    return "".join(out).encode()


def render_readings(rows: Iterable[ReadingRow], unexported: int = 0) -> bytes:
    """The exposition of the calibration gauges of ``rows`` (several models' at once; each
    with ``unexported`` slices not exported)."""
    by_model: dict[str, list[ReadingRow]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    return assemble(model_fragment(m, by_model[m], unexported) for m in sorted(by_model))


def live_text(
    times: ExpositionTimes | None,
    now: datetime,
    readable: bool,
    folds: Mapping[str, FoldStatus] | None = None,
) -> bytes:
    """Live samples about the stored exposition: whether it could be read
    (``calmon_exporter_up``), and per model the age of its served readings: seconds since they
    were last found current (the exposition's time, or an earlier one while the model's
    refresh fails), or since its first contract while it has none; then, per model of
    ``folds`` (``fold_store.fleet_fold_status``), its labels waiting for the fold and the
    fold's lag (``fold_samples``)."""
    out = [
        _header("calmon_exporter_up", "1 when the stored readings could be read."),
        f"calmon_exporter_up {floatToGoString(1.0 if readable else 0.0)}\n",
    ]
    if readable:
        out.append(
            _header(
                "calmon_readings_age_seconds",
                "Seconds since the model's served readings were last found current (since its"
                " first contract while it has none); grows while its refresh fails or waits for"
                " the next cycle.",
            )
        )
        if times is not None:
            stamp = now.timestamp()
            out.extend(
                f"calmon_readings_age_seconds{_labels((('model', m),))}"
                f" {floatToGoString(stamp - times.current_since(m))}\n"
                for m in times.models
            )
        out.append(fold_samples(folds or {}, now))
    return "".join(out).encode()


def fold_samples(folds: Mapping[str, FoldStatus], now: datetime) -> str:
    """``calmon_labels_unfolded{model}``: labels acknowledged but not yet folded into the
    buckets; ``calmon_label_fold_lag_seconds{model}``: seconds since the oldest of them was
    acknowledged (0 when none waits), what the model's readings lag its labels by."""
    out = [
        _header(
            "calmon_labels_unfolded",
            "Labels acknowledged but not yet folded into the model's buckets; its readings"
            " leave them out until the next fold.",
        )
    ]
    out.extend(
        f"calmon_labels_unfolded{_labels((('model', m),))} {floatToGoString(s.unfolded)}\n"
        for m, s in sorted(folds.items())
    )
    out.append(
        _header(
            "calmon_label_fold_lag_seconds",
            "Seconds since the oldest label still waiting for the fold was acknowledged"
            " (0 when none waits).",
        )
    )
    stamp = now.timestamp()
    out.extend(
        f"calmon_label_fold_lag_seconds{_labels((('model', m),))}"
        f" {floatToGoString(_lag(s, stamp))}\n"
        for m, s in sorted(folds.items())
    )
    return "".join(out)


def _lag(status: FoldStatus, stamp: float) -> float:
    oldest = status.oldest_queued_at
    return 0.0 if oldest is None else max(stamp - oldest.timestamp(), 0.0)
