"""``calmon demo``: stream the scenario into a running calmon through its HTTP API only."""

from __future__ import annotations

import math
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO
from urllib.parse import quote

import numpy as np

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
from service.remote import RemoteError, call, error_text

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
    url: str
    token: str

    def send(self, method: str, path: str, body: Any = None) -> Any:
        """One API call; its decoded reply, or ``DemoFailed`` for an error status."""
        status, reply = call(self.url, self.token, method, path, body, timeout=60)
        self._raise_for(status, reply, f"{method} {path}")
        return reply

    def _raise_for(self, status: int, reply: Any, what: str) -> None:
        if status in (401, 403):
            raise DemoFailed(
                f"the service at {self.url} rejected the token ({status}): {error_text(reply)}\n"
                "the demo registers a contract, so it needs an admin token",
                exit_code=2,
            )
        if not 200 <= status < 300:
            raise DemoFailed(f"{what} failed ({status}): {error_text(reply)}")

    def reading(self, model: str, window: str, cohort: str) -> dict[str, Any]:
        """``GET .../calibration`` of a trailing ``window`` and a cohort slice (``key=value``)."""
        query = f"window={window}&cohort={quote(cohort, safe=':=')}"
        reading: dict[str, Any] = self.send("GET", f"/v1/models/{quote(model)}/calibration?{query}")
        return reading

    def check_model_is_free(self, model: str) -> None:
        """Refuse to add a demo contract to a model whose active contract the demo did not make."""
        path = f"/v1/models/{quote(model)}/contract"
        status, reply = call(self.url, self.token, "GET", path)
        if status == 404:
            return
        self._raise_for(status, reply, f"GET {path}")
        if not str(reply.get("checkpoint", "")).startswith(CHECKPOINT):
            raise DemoFailed(
                f"model {model!r} has an active contract the demo did not register "
                f"(checkpoint {reply.get('checkpoint')!r}); choose another --model",
                exit_code=2,
            )


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


def _chunks(rows: np.ndarray) -> Iterator[np.ndarray]:
    for i in range(0, rows.size, MAX_BATCH):
        yield rows[i : i + MAX_BATCH]


@dataclass
class _Sent:
    predictions: int = 0
    labels: int = 0
    unlabeled: int = 0
    contract: dict[str, Any] = field(default_factory=dict)


def _stream(api: _Api, options: DemoOptions, scenario: Scenario, err: TextIO) -> _Sent:
    """Register the contract, then send predictions and due labels step by step."""
    contract = api.send(
        "POST", "/v1/contracts/fit", _fit_body(options.model, options.seed, scenario)
    )
    sent = _Sent(contract=contract)
    print(
        f"demo: contract v{contract['version']} of {options.model!r} registered; streaming "
        f"{scenario.offsets.size:,} predictions over {options.hours:g} h of event time",
        file=err,
    )
    tag = f"{options.model}-v{contract['version']}"
    stamp = [
        format_timestamp(scenario.start + timedelta(seconds=float(s))) for s in scenario.offsets
    ]
    progress = Progress(err, scenario.offsets.size, int(scenario.labeled_by_end.sum()))
    for tick in ticks(scenario):
        for rows in _chunks(tick.predictions):
            items = [
                {
                    "id": f"{tag}-{i:07d}",
                    "ts": stamp[i],
                    "cohort": {COHORT_KEY: COHORTS[scenario.regions[i]]},
                    "logits": scenario.logits[i].tolist(),
                }
                for i in rows.tolist()
            ]
            body = {"model": options.model, "contract_id": contract["id"], "predictions": items}
            sent.predictions += api.send("POST", "/v1/predictions", body)["accepted"]
        for rows in _chunks(tick.labels):
            items = [
                {
                    "id": f"{tag}-{i:07d}",
                    "label": CLASSES[scenario.labels[i]],
                    "ts": format_timestamp(
                        scenario.start + timedelta(seconds=float(scenario.label_offsets[i]))
                    ),
                }
                for i in rows.tolist()
            ]
            sent.labels += api.send(
                "POST", "/v1/labels", {"model": options.model, "labels": items}
            )["joined"]
        fraction = (tick.clock - scenario.start) / (scenario.end - scenario.start)
        progress.update(fraction, tick.clock, sent.predictions, sent.labels)
    progress.finish()
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
    except RemoteError as exc:
        print(f"calmon demo: {exc}", file=err)
        return 2
    except DemoFailed as exc:
        print(f"calmon demo: {exc}", file=err)
        return exc.exit_code
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
