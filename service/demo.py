"""``calmon demo``: stream a realistic scenario into a running calmon through its HTTP API only.

The scenario (event time, UTC; "now" is when the demo starts):

* A 3-class support-ticket router (``billing``, ``technical``, ``account``) whose raw logits are
  over-confident: the true class is drawn from ``softmax(z / TRUE_TEMPERATURE)``. The demo posts
  a labeled fit set and a disjoint held-out eval set to ``POST /v1/contracts/fit``; the service
  fits the temperature (close to ``TRUE_TEMPERATURE``) and stores the contract.
* ``rate`` predictions per simulated hour over the last ``hours`` hours, in three cohorts
  ``region=eu|us|apac`` (``COHORT_SHARES``). Each label becomes known a uniform 1-4 hours after
  its prediction (``LABEL_DELAY_HOURS``).
* From halfway through the span, a share ``DRIFT_SHARE`` of apac's tickets come from something
  the model never saw: it routes them with its usual confidence, but to a wrong queue (the label
  is drawn uniformly among the classes it did not pick). apac's accuracy drops while its
  confidence does not, so its ECE rises; eu and us stay calibrated.
* A simulated clock walks the span in ``STEP`` steps. Each step sends the predictions whose
  time falls in it, then the labels whose time has come; labels due after "now" are never sent,
  so the newest predictions stay unlabeled, as in production.

With the defaults (12 hours, 1,500 predictions an hour), replaying the scenario through the
calibration core for seeds 0-99 gives ``alert`` for apac's 24h reading and ``ok`` for eu and us
every time; at 8 hours apac is still warn or alert every time, at 6 hours only 87 times in 100 (too
few of its over-confident predictions are labeled by the end), so ``MIN_HOURS`` is 8.
"""

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

from service.remote import RemoteError, call, error_text
from service.validation import format_timestamp

CLASSES = ("billing", "technical", "account")
COHORT_KEY = "region"
COHORTS = ("eu", "us", "apac")
COHORT_SHARES = (0.40, 0.35, 0.25)
DRIFTING = "apac"
#: The raw logits are this many times too sharp; the service's fitted temperature recovers it.
TRUE_TEMPERATURE = 1.6
#: Share of the drifting cohort's predictions, after the onset, that are confidently wrong.
DRIFT_SHARE = 0.4
LABEL_DELAY_HOURS = (1.0, 4.0)
#: Rows in each of the contract's fit and eval sets.
REFERENCE_ROWS = 3000
BIN_EDGES = [round(k / 10, 1) for k in range(11)]
POLICY = {"max_ece": 0.05, "max_ece_increase": 0.03, "min_labeled": 200}
STEP = timedelta(minutes=15)
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


@dataclass(frozen=True, eq=False)
class Scenario:
    """The generated stream; row ``i`` is one prediction and its (possibly future) label.

    ``offsets`` are seconds since ``start`` in ascending order, ``label_offsets`` likewise for
    each row's label (always 1-4 hours after its prediction, so possibly after ``end``);
    ``regions`` index ``COHORTS``; ``logits`` is (N, 3) raw logits rounded to 4 decimals;
    ``labels`` index ``CLASSES``; ``drifted`` marks the rows made confidently wrong.
    """

    start: datetime
    end: datetime
    onset: datetime
    offsets: np.ndarray
    label_offsets: np.ndarray
    regions: np.ndarray
    logits: np.ndarray
    labels: np.ndarray
    drifted: np.ndarray

    @property
    def span_seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def labeled_by_end(self) -> np.ndarray:
        """Rows whose label is due before ``end``: the labels the demo sends."""
        return self.label_offsets < self.span_seconds


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Row-wise ``softmax(z / T)`` of (N, K) logits (kept local: the calibration package pulls in
    scipy, a second of start-up for a CLI that needs none of it)."""
    z = (logits - logits.max(axis=1, keepdims=True)) / temperature
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3) raw logits with a noisy margin for one class, and labels ~ softmax(z / T_true)."""
    logits = rng.normal(0.0, 1.0, size=(n, len(CLASSES)))
    logits[np.arange(n), rng.integers(0, len(CLASSES), n)] += rng.uniform(1.0, 5.0, n)
    logits = np.round(logits, 4)
    cumulative = np.cumsum(_softmax(logits, TRUE_TEMPERATURE), axis=1)
    labels = (rng.random(n)[:, None] > cumulative[:, :-1]).sum(axis=1)
    return logits, labels


def reference_sets(seed: int) -> dict[str, dict[str, list[Any]]]:
    """The contract's labeled ``fit`` and ``eval`` sets (disjoint draws), as the API takes them."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0])
    sets = {}
    for name in ("fit", "eval"):
        logits, labels = _draw(rng, REFERENCE_ROWS)
        sets[name] = {"logits": logits.tolist(), "labels": labels.tolist()}
    return sets


def build_scenario(*, seed: int, hours: float, rate: float, end: datetime) -> Scenario:
    """Generate the stream for ``[end - hours, end)``; the same arguments give the same stream."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    span = hours * 3600.0
    n = max(1, round(rate * hours))
    offsets = np.sort(rng.uniform(0.0, span, n))
    regions = rng.choice(len(COHORTS), size=n, p=COHORT_SHARES)
    logits, labels = _draw(rng, n)
    low, high = LABEL_DELAY_HOURS
    label_offsets = offsets + rng.uniform(low * 3600.0, high * 3600.0, n)
    drifted = (
        (regions == COHORTS.index(DRIFTING)) & (offsets >= span / 2) & (rng.random(n) < DRIFT_SHARE)
    )
    wrong = (logits.argmax(axis=1) + rng.integers(1, len(CLASSES), n)) % len(CLASSES)
    start = end - timedelta(seconds=span)
    return Scenario(
        start=start,
        end=end,
        onset=start + timedelta(seconds=span / 2),
        offsets=offsets,
        label_offsets=label_offsets,
        regions=regions,
        logits=logits,
        labels=np.where(drifted, wrong, labels),
        drifted=drifted,
    )


@dataclass(frozen=True)
class Tick:
    """One step of the simulated clock: rows whose prediction, and rows whose label, fall in
    ``[clock - STEP, clock)`` (label rows in label-time order)."""

    clock: datetime
    predictions: np.ndarray
    labels: np.ndarray


def ticks(scenario: Scenario, step: timedelta = STEP) -> Iterator[Tick]:
    """Walk the span: every prediction once, each label after its prediction, none after end."""
    span, width = scenario.span_seconds, step.total_seconds()
    bounds = [*np.arange(0.0, span, width)[1:], span]
    by_label_time = np.argsort(scenario.label_offsets, kind="stable")
    label_times = scenario.label_offsets[by_label_time]
    p0 = l0 = 0
    for bound in bounds:
        p1 = int(np.searchsorted(scenario.offsets, bound, side="left"))
        l1 = int(np.searchsorted(label_times, bound, side="left"))
        yield Tick(
            clock=scenario.start + timedelta(seconds=float(bound)),
            predictions=np.arange(p0, p1),
            labels=by_label_time[l0:l1],
        )
        p0, l0 = p1, l1


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
