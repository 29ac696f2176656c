"""``calmon demo``: stream the scenario into a running calmon through its HTTP API only, with
the Python client (``service.client``)."""

from __future__ import annotations

import math
import re
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import numpy as np

from service.client import Calmon, RequestFailed, Unreachable
from service.client.reports import error_text
from service.common.values import format_timestamp
from service.demo.scenario import (
    BIN_EDGES,
    CLASSES,
    COHORT_KEY,
    COHORTS,
    DRIFT_SHARE,
    DRIFTING,
    POLICY,
    Scenario,
    build_scenario,
    reference_sets,
    ticks,
)

#: Contracts the demo registers name this checkpoint; it never adds one to another model.
CHECKPOINT = "calmon-demo-ticket-router"
MAX_BATCH = 5000
#: The trailing window the demo reads and points at (the review page's default).
WINDOW = "24h"
LATEST_WINDOW = "1h"
MIN_HOURS, MAX_HOURS = 8.0, 168.0


class DemoFailed(Exception):
    """The demo could not run or finish; ``exit_code`` 2 for setup problems, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class DemoOptions:
    """What ``calmon demo`` was asked: ``hours`` of event time, ``rate`` predictions per hour,
    and ``wait`` seconds (0: don't) for the service's refresher to publish the gauges."""

    url: str
    token: str
    model: str = "demo"
    hours: float = 12.0
    rate: float = 1500.0
    seed: int = 7
    wait: float = 90.0

    def __post_init__(self) -> None:
        if not MIN_HOURS <= self.hours <= MAX_HOURS:
            raise ValueError(
                f"--hours must be between {MIN_HOURS:g} and {MAX_HOURS:g}: labels come 1-4 h late, "
                "so a shorter span labels too little of the drift to flag it"
            )
        if not 10 <= self.rate <= 100_000:
            raise ValueError("--rate must be between 10 and 100000 predictions per hour")
        if self.wait < 0:
            raise ValueError("--wait must be >= 0 seconds")


class Progress:
    """Predictions and labels sent, on ``stream``: one redrawn line on a terminal, otherwise a
    plain line at every tenth of the span."""

    def __init__(self, stream: TextIO, predictions: int, labels: int) -> None:
        self.stream, self.total_predictions, self.total_labels = stream, predictions, labels
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._reported = 0

    def update(self, fraction: float, clock: datetime, predictions: int, labels: int) -> None:
        """Show progress through the span (``fraction`` in [0, 1]) at simulated time ``clock``."""
        counts = (
            f"predictions {predictions:,}/{self.total_predictions:,}  "
            f"labels {labels:,}/{self.total_labels:,}"
        )
        when = clock.strftime("%H:%M UTC")
        if self.tty:
            bar = "#" * round(fraction * 24)
            self.stream.write(f"\r  [{bar:<24}] {fraction:4.0%}  {when}  {counts} ")
        elif math.floor(fraction * 10) > self._reported:
            self._reported = math.floor(fraction * 10)
            self.stream.write(f"demo: {fraction:4.0%} of the span, clock {when}, {counts}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class _Api:
    """The demo's calls, through ``service.client``: synchronous ones, and a logging client."""

    url: str
    token: str

    def __post_init__(self) -> None:
        self.client = Calmon(self.url, self.token)

    def _raise_for(self, failed: RequestFailed, what: str) -> DemoFailed:
        if failed.status in (401, 403):
            return DemoFailed(
                f"the service at {self.url} rejected the token ({failed.status}): "
                f"{error_text(failed.reply)}\n"
                "the demo registers a contract, so it needs an admin token",
                exit_code=2,
            )
        return DemoFailed(f"{what} failed ({failed.status}): {error_text(failed.reply)}")

    def fit(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.fit(body).raw
        except RequestFailed as failed:
            raise self._raise_for(failed, "POST /v1/contracts/fit") from None

    def reading(self, model: str, window: str, cohort: str) -> dict[str, Any]:
        """``GET .../calibration`` of a trailing ``window`` and a cohort slice (``key=value``)."""
        try:
            return self.client.calibration(model, window=window, cohort=cohort).raw
        except RequestFailed as failed:
            raise self._raise_for(failed, f"GET /v1/models/{model}/calibration") from None

    def check_model_is_free(self, model: str) -> None:
        """Refuse to add a demo contract to a model whose active contract the demo did not make."""
        try:
            contract = self.client.contract(model)
        except RequestFailed as failed:
            if failed.status == 404:
                return
            raise self._raise_for(failed, f"GET /v1/models/{model}/contract") from None
        if not str(contract.raw.get("checkpoint", "")).startswith(CHECKPOINT):
            raise DemoFailed(
                f"model {model!r} has an active contract the demo did not register "
                f"(checkpoint {contract.raw.get('checkpoint')!r}); choose another --model",
                exit_code=2,
            )

    def close(self) -> None:
        self.client.close()


def _fit_body(model: str, seed: int, scenario: Scenario) -> dict[str, Any]:
    return {
        "model": model,
        "checkpoint": f"{CHECKPOINT}:seed-{seed}",
        "task": "multiclass",
        "classes": list(CLASSES),
        "population": "support tickets of every region (calmon demo)",
        "outcome": "top-label correct: the ticket went to the right queue",
        "data_window": {
            "start": format_timestamp(scenario.start - timedelta(days=30)),
            "end": format_timestamp(scenario.start - timedelta(days=1)),
        },
        "split": {"method": "random by ticket id"},
        "bin_edges": BIN_EDGES,
        "policy": POLICY,
        "method": "temperature",
        **reference_sets(seed),
    }


@dataclass
class _Sent:
    predictions: int = 0
    labels: int = 0
    unlabeled: int = 0
    contract: dict[str, Any] = field(default_factory=dict)


#: Seconds the demo waits at the end for the logging client to deliver what it queued.
DELIVERY_SECONDS = 120.0


def _stream(api: _Api, options: DemoOptions, scenario: Scenario, err: TextIO) -> _Sent:
    """Register the contract, then log predictions and due labels step by step through the
    client (sent in the background, in order, as Arrow batches)."""
    contract = api.fit(_fit_body(options.model, options.seed, scenario))
    sent = _Sent(contract=contract)
    print(
        f"demo: contract v{contract['version']} of {options.model!r} registered; streaming "
        f"{scenario.offsets.size:,} predictions over {options.hours:g} h of event time",
        file=err,
    )
    tag = f"{options.model}-v{contract['version']}"
    ids = np.char.add(f"{tag}-", np.char.zfill(np.arange(scenario.offsets.size).astype(str), 7))
    start = np.datetime64(scenario.start.replace(tzinfo=None), "us")
    stamps = start + (scenario.offsets * 1e6).astype("timedelta64[us]")
    label_stamps = start + (scenario.label_offsets * 1e6).astype("timedelta64[us]")
    regions = np.array(COHORTS)[scenario.regions]
    names = np.array(CLASSES)[scenario.labels]
    progress = Progress(err, scenario.offsets.size, int(scenario.labeled_by_end.sum()))
    logged = Calmon(api.url, api.token, model=options.model, batch_size=MAX_BATCH, max_delay=0.5)
    try:
        predictions = labels = 0
        for tick in ticks(scenario):
            rows = tick.predictions
            if rows.size:
                predictions += logged.log_predictions(
                    ids[rows], scenario.logits[rows], stamps[rows], {COHORT_KEY: regions[rows]}
                )
            rows = tick.labels
            if rows.size:
                labels += logged.log_labels(ids[rows], names[rows], label_stamps[rows])
            fraction = (tick.clock - scenario.start) / (scenario.end - scenario.start)
            progress.update(fraction, tick.clock, predictions, labels)
        progress.finish()
        delivered = logged.close(timeout=DELIVERY_SECONDS)
    finally:
        logged.close(timeout=0)
    stats = logged.stats
    if stats.rejected:
        raise DemoFailed(f"the service refused {stats.rejected:,} rows: {stats.last_error}")
    if not delivered:
        raise DemoFailed(
            f"{stats.dropped:,} rows could not be delivered in {DELIVERY_SECONDS:g} s: "
            f"{stats.last_error}",
            exit_code=2,
        )
    sent.predictions, sent.labels = stats.accepted, stats.joined
    sent.unlabeled = sent.predictions - sent.labels
    return sent


_SAMPLE = re.compile(r"^(calmon_\w+)\{(.*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def gauge_lines(exposition: str, model: str, version: int, window: str) -> dict[str, str]:
    """``{metric name + cohort: line}`` of the model's ``version``/``window`` calibration gauges."""
    found = {}
    for line in exposition.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if (labels.get("model"), labels.get("contract_version"), labels.get("window")) == (
            model,
            str(version),
            window,
        ):
            found[f"{match.group(1)} {labels.get('cohort')}"] = line
    return found


def _metrics_text(url: str) -> str:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _published(lines: dict[str, str], want: dict[str, float]) -> bool:
    """Whether the ``all`` slice's gauges show the values in ``want`` (metric name: value)."""
    for metric, value in want.items():
        line = lines.get(f"{metric} all")
        if line is None or float(line.rsplit(" ", 1)[1]) != value:
            return False
    return True


def _await_gauges(
    url: str, model: str, version: int, want: dict[str, float], wait: float, err: TextIO
) -> dict[str, str] | None:
    """Poll ``/metrics`` until the refresher has published what the API read (``want``), or
    give up after ``wait`` seconds (None)."""
    print(
        f"waiting up to {wait:g} s for the service's next refresh of the gauges (--wait 0 skips)",
        file=err,
    )
    deadline = time.monotonic() + wait
    while True:
        try:
            lines = gauge_lines(_metrics_text(url), model, version, WINDOW)
        except (urllib.error.URLError, OSError, ValueError):
            lines = {}
        if _published(lines, want):
            return lines
        if time.monotonic() >= deadline:
            return None
        time.sleep(1.0)


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _report(
    options: DemoOptions,
    scenario: Scenario,
    sent: _Sent,
    readings: dict[str, dict[str, Any]],
    latest: dict[str, Any],
    gauges: dict[str, str] | None,
) -> str:
    url, model, contract = options.url.rstrip("/"), options.model, sent.contract
    drifting = f"{COHORT_KEY}={DRIFTING}"
    query = f"window={WINDOW}&cohort={COHORT_KEY}:{DRIFTING}"
    when = "%Y-%m-%d %H:%M"
    lines = [
        f"calmon demo: model {model!r}, contract v{contract['version']} ({contract['id']}), "
        f"temperature T = {contract['calibrator']['temperature']:.4f} fitted by the service",
        f"  streamed {sent.predictions:,} predictions ({scenario.start:{when}} to "
        f"{scenario.end:{when}} UTC, three cohorts)",
        f"  and {sent.labels:,} labels, each 1-4 h after its prediction; {sent.unlabeled:,} "
        "predictions of the last 4 h still wait for theirs",
        f"  from {scenario.onset:{when}} UTC, {DRIFT_SHARE:.0%} of {drifting}'s tickets go to a "
        "wrong queue with the model's usual confidence",
        "",
        f"readings over the last {WINDOW}:",
        f"  {'cohort':<14}{'predictions':>12}{'labeled':>9}{'coverage':>10}{'accuracy':>10}"
        f"{'confidence':>12}  {'ECE [95% interval]':<22}status",
    ]
    for name, r in readings.items():
        m, ci = r["metrics"], r["metrics"].get("ece_ci") or [None, None]
        lines.append(
            f"  {name:<14}{r['n_predictions']:>12,}{r['n_labeled']:>9,}"
            f"{_num(r['label_coverage'], 2):>10}{_num(m.get('accuracy')):>10}"
            f"{_num(m.get('mean_confidence')):>12}  "
            f"{_num(m.get('ece')) + ' [' + _num(ci[0]) + ', ' + _num(ci[1]) + ']':<22}"
            f"{r['drift']['status']}"
        )
    lines += [f"  {drifting}: {reason}" for reason in readings[drifting]["drift"]["reasons"]]
    lines += [
        f"  latest {LATEST_WINDOW}: {latest['n_predictions']:,} predictions, "
        f"{latest['n_labeled']:,} labeled (coverage {_num(latest['label_coverage'], 2)}); "
        f"expected accuracy before the labels: {_num(latest['drift']['expected_accuracy'])}",
        "",
        "where to look:",
        f"  review page   {url}/ui/models/{model}?{query}",
        "                (sign in with a reader token: calmon token create --role reader)",
        f'  calibration   curl -H "Authorization: Bearer $CALMON_TOKEN" '
        f"'{url}/v1/models/{model}/calibration?{query}'",
        f"  diagram       {url}/v1/models/{model}/reliability.svg?{query}",
        f"  cohorts       {url}/v1/models/{model}/cohorts",
        f"  metrics       {url}/metrics  (calmon_drift_status: -1 insufficient_data, 0 ok, "
        "1 warn, 2 alert)",
    ]
    if gauges:
        lines += [
            f"                {line}"
            for key, line in sorted(gauges.items())
            if key.startswith("calmon_drift_status ")
        ]
    else:
        lines += [
            "                the calibration gauges appear after the service's next refresh "
            "(every CALMON_REFRESH_SECONDS, 30 s by default):",
            f"                curl -s {url}/metrics | grep "
            f"'calmon_drift_status{{.*model=\"{model}\"'",
        ]
    return "\n".join(lines)


def run_demo(options: DemoOptions, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the scenario against ``options.url``; report on ``out``; return the exit status
    (0 done, 1 the service refused part of the stream, 2 unreachable or token rejected)."""
    api = _Api(options.url, options.token)
    end = datetime.now(UTC).replace(microsecond=0)
    scenario = build_scenario(seed=options.seed, hours=options.hours, rate=options.rate, end=end)
    try:
        api.check_model_is_free(options.model)
        sent = _stream(api, options, scenario, err)
        slices = ["all", *(f"{COHORT_KEY}={c}" for c in COHORTS)]
        readings = {s: api.reading(options.model, WINDOW, s) for s in slices}
        latest = api.reading(options.model, LATEST_WINDOW, "all")
    except Unreachable as exc:
        print(f"calmon demo: {exc}", file=err)
        return 2
    except DemoFailed as exc:
        print(f"calmon demo: {exc}", file=err)
        return exc.exit_code
    finally:
        api.close()
    gauges = None
    if options.wait > 0:
        want = {
            "calmon_predictions": float(readings["all"]["n_predictions"]),
            "calmon_labeled_predictions": float(readings["all"]["n_labeled"]),
        }
        version = sent.contract["version"]
        gauges = _await_gauges(options.url, options.model, version, want, options.wait, err)
    print(_report(options, scenario, sent, readings, latest, gauges), file=out)
    return 0
