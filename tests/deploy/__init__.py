"""Checks of the deployment material: ``deploy/``, the Dockerfile and docker-compose.yml.

Shared here: the metric names calmon exports on ``GET /metrics``, which rules and dashboard may
use (``test_metric_names.py`` checks them against the code that exports them), the regex that
finds metric names in PromQL (and in annotation text), and a ``promtool`` runner.

``promtool`` comes from Debian's ``prometheus`` package, which ``.ci/run`` installs. A missing
``promtool`` fails these tests rather than skipping them: a skipped check of the alert rules would
pass CI with rules nobody has evaluated.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# The calibration gauges served from the stored exposition (service/export/collector.py), labelled
# {model, contract_version, cohort, window} unless noted.
GAUGES = frozenset(
    {
        "calmon_ece",
        "calmon_ece_debiased",
        "calmon_ece_ci_lower",
        "calmon_ece_ci_upper",
        "calmon_nll",
        "calmon_brier",
        "calmon_accuracy",
        "calmon_mean_confidence",
        "calmon_predictions",
        "calmon_labeled_predictions",
        "calmon_label_coverage",
        "calmon_ece_delta",
        "calmon_refit_temperature",
        "calmon_confidence_psi",
        "calmon_expected_accuracy",
        "calmon_drift_status",
        # The contract's policy.max_ece, labelled {model, contract_version}, so that a query
        # compares ECE with each contract's own threshold.
        "calmon_policy_max_ece",
        # The slices of a model beyond its series budget, labelled {model}.
        "calmon_slices_unexported",
    }
)
# Per-process counters and histograms (the instruments.py modules of service/export and
# service/stream), added up across gunicorn workers.
COUNTERS = frozenset(
    {
        "calmon_predictions_ingested_total",
        "calmon_labels_ingested_total",
        "calmon_rejected_items_total",
        # The refresher's failed model refreshes and the pending labels' expiries,
        # rejections and discards (all {model}).
        "calmon_refresh_failures_total",
        "calmon_pending_labels_expired_total",
        "calmon_pending_labels_rejected_total",
        "calmon_pending_labels_discarded_total",
    }
)
# Live gauges computed on each scrape, about the stored readings themselves.
# calmon_readings_age_seconds, calmon_labels_unfolded and calmon_label_fold_lag_seconds are
# labelled {model}; calmon_exporter_up has no labels.
SERVICE_GAUGES = frozenset(
    {
        "calmon_readings_age_seconds",
        "calmon_exporter_up",
        "calmon_labels_unfolded",
        "calmon_label_fold_lag_seconds",
    }
)
HISTOGRAMS = frozenset({"calmon_label_delay_seconds", "calmon_http_request_duration_seconds"})

# Every series name Prometheus can hold for the metrics above (a histogram is three series).
KNOWN_SERIES = (
    GAUGES
    | SERVICE_GAUGES
    | COUNTERS
    | HISTOGRAMS
    | {h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)

# A whole metric identifier mentioning calmon_, including recording-rule names such as
# `model:calmon_predictions_ingested:rate5m`. Case-sensitive: alert names (CalmonDown) don't match.
METRIC_RE = re.compile(r"(?<![\w:])[a-z_:]*calmon_[a-z0-9_:]*")

PROMTOOL_MISSING = (
    "promtool is not on PATH. `.ci/run` installs it with Debian's prometheus package "
    "(`apt-get install -y --no-install-recommends prometheus`); install it the same way."
)


def metric_names(text: str) -> set[str]:
    """Return every calmon metric identifier mentioned in ``text`` (PromQL, YAML or JSON)."""
    return set(METRIC_RE.findall(text))


def promtool(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``promtool`` with ``args``; fail the test (never skip) when it is not installed."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail(PROMTOOL_MISSING, pytrace=False)
    return subprocess.run(
        [exe, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    """Assert that a promtool run exited 0, showing its whole output when it did not."""
    assert result.returncode == 0, (
        f"{' '.join(result.args)} exited {result.returncode}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
