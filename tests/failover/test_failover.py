"""calmon on a pg_auto_failover formation: the primary's host lost three times in a row under
load, and the primary cut off from the monitor and the standby for 60 s while calmon still
reaches it. Nothing acknowledged is lost or doubled, no reply is a 5xx but 503, writes resume.

These tests build their own PostgreSQL formation (``tests.support.formation``) whatever
``CALMON_TEST_BACKEND`` says; ``make test`` runs them once, after the two backends' passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from service.db.database import Database
from service.db.models import (
    AuditEventRecord,
    ContractRecord,
    ContractRetirement,
    GateDecisionRecord,
    LabelRecord,
    PredictionRecord,
    RefreshLease,
    UnfoldedLabelBatch,
)
from service.stream.maintenance import rebuild_buckets
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body
from tests.integration.test_served import CALMON, Served, metric_samples, serving
from tests.support import formation as formations
from tests.support import netns
from tests.support.formation import Formation
from tests.support.load import AUDITED_MODEL, MODEL, Load

pytestmark = pytest.mark.skipif(
    formations.available() is not None, reason=str(formations.available())
)

AUDIT_KEY = "failover-test-audit-key-0123456789abcdef"
#: Seconds within which writes must resume after the primary's host is lost.
RESUME_SECONDS = 15.0
#: Seconds the primary stays cut off in the partition test.
PARTITION_SECONDS = 60.0
#: calmon's commit bound in the partition test (CALMON_COMMIT_SECONDS). A request waits for
#: its own commit at most this long, and as long again for each commit ahead of it that holds
#: rows it needs: far less than the partition.
COMMIT_SECONDS = 5.0
#: A JSON file the figures are written to when set (they are printed in any case).
REPORT = os.environ.get("CALMON_FAILOVER_REPORT")


@dataclass
class Failover:
    """What one lost primary looked like from calmon's clients."""

    lost: str
    promoted: str
    seconds_to_promotion: float
    seconds_without_write: float
    replies_503: int
    rows_retried: int
    writes_retried: int


def _migrate(url: str) -> None:
    env = {**os.environ, "CALMON_DATABASE_URL": url, "CALMON_AUDIT_KEY": AUDIT_KEY}
    subprocess.run([str(CALMON), "migrate"], env=env, check=True, capture_output=True, timeout=120)


def _status_counts(server: Served) -> dict[str, float]:
    """Requests answered so far, by status (all routes, from calmon's own metrics)."""
    status, text = server.call("GET", "/metrics", token=None)
    assert status == 200
    counts: dict[str, float] = {}
    for (name, labels), value in metric_samples(text).items():
        if name == "calmon_http_request_duration_seconds_count":
            code = dict(labels)["status"]
            counts[code] = counts.get(code, 0.0) + value
    return counts


@contextmanager
def _calmon_on(formation: Formation, tmp_path: Path, **settings: str) -> Iterator[Served]:
    url = formation.sqlalchemy_url()
    _migrate(url)
    with serving(url, tmp_path, CALMON_AUDIT_KEY=AUDIT_KEY, **settings) as server:
        yield server


def _verify_everything(server: Served, load: Load, url: str) -> dict[str, Any]:
    """Every acknowledged row, contract, decision, retirement and audit event stored exactly
    once; the audit log and every contract verify; readings equal a rebuild from the rows."""
    status, reading = server.call(
        "GET", f"/v1/models/{MODEL}/calibration?window=24h&consistent=true"
    )
    assert status == 200, reading
    predictions = set(load.predictions) | set(load.probes)
    assert len(predictions) == len(load.predictions) + len(load.probes)
    assert reading["n_predictions"] == len(predictions)
    assert reading["n_labeled"] == len(load.labels)

    database = Database(url)
    try:
        with database.read_session() as session:
            stored = session.scalar(
                select(func.count())
                .select_from(PredictionRecord)
                .where(PredictionRecord.model == MODEL)
            )
            assert stored == len(predictions)
            labels = session.scalar(
                select(func.count()).select_from(LabelRecord).where(LabelRecord.model == MODEL)
            )
            assert labels == len(load.labels)
            assert session.scalar(select(func.count()).select_from(UnfoldedLabelBatch)) == 0
            contracts = session.scalars(
                select(ContractRecord.id).where(ContractRecord.model == AUDITED_MODEL)
            ).all()
            assert sorted(contracts) == sorted(load.contracts), "contracts lost or doubled"
            decisions = session.scalars(
                select(GateDecisionRecord.id).where(GateDecisionRecord.model == AUDITED_MODEL)
            ).all()
            assert sorted(decisions) == sorted(load.decisions), "decisions lost or doubled"
            retired = session.scalars(select(ContractRetirement.contract_id)).all()
            assert sorted(retired) == sorted(load.retired), "retirements lost or doubled"
            events: dict[str, int] = dict(
                session.execute(
                    select(AuditEventRecord.type, func.count())
                    .where(AuditEventRecord.model == AUDITED_MODEL)
                    .group_by(AuditEventRecord.type)
                ).all()
            )
            assert events == {
                "contract_fitted": len(load.contracts),
                "gate_decided": len(load.decisions),
                "contract_retired": len(load.retired),
            }
            lease = session.scalars(select(RefreshLease)).all()
            assert lease, "the refresher never held its lease"
        with database.session() as session:
            rebuild_buckets(session, MODEL)
            session.commit()
    finally:
        database.dispose()
    status, rebuilt = server.call(
        "GET", f"/v1/models/{MODEL}/calibration?window=24h&consistent=true"
    )
    assert status == 200
    _assert_same(_without_times(rebuilt), _without_times(reading))

    status, audit = server.call("GET", "/v1/audit/verify")
    assert status == 200 and audit["valid"], audit
    assert audit["keyed_head"]["valid"], audit["keyed_head"]
    for contract_id in load.contracts:
        status, verification = server.call("GET", f"/v1/contracts/{contract_id}/verify")
        assert status == 200 and verification["valid"], verification
    return {
        "predictions": len(predictions),
        "labels": len(load.labels),
        "contracts": len(load.contracts),
        "decisions": len(load.decisions),
        "retirements": len(load.retired),
        "audit_events": sum(events.values()),
    }


def _assert_same(rebuilt: Any, served: Any, path: str = "reading") -> None:
    """Equal counts and texts; floats equal but for their last digits (a rebuild adds the
    same numbers in another order)."""
    if isinstance(served, dict):
        assert isinstance(rebuilt, dict) and rebuilt.keys() == served.keys(), path
        for key in served:
            _assert_same(rebuilt[key], served[key], f"{path}.{key}")
    elif isinstance(served, list):
        assert isinstance(rebuilt, list) and len(rebuilt) == len(served), path
        for index, (a, b) in enumerate(zip(rebuilt, served, strict=True)):
            _assert_same(a, b, f"{path}[{index}]")
    elif isinstance(served, float):
        assert rebuilt == pytest.approx(served, rel=1e-9, abs=1e-12), path
    else:
        assert rebuilt == served, path


def _assert_every_row_sent(sent: bool, load: Load) -> None:
    """Every row logged went out and was acknowledged; no client got a reply but 200, 201 or
    503 (a feeder counts any other as rejected, the prober and the auditor fail on one)."""
    assert sent, "rows were still unsent when the load stopped"
    assert not load.failures, load.failures
    assert load.rows_rejected() == 0


def _say(began: float, message: str) -> None:
    print(f"[{time.monotonic() - began:6.1f} s] {message}", flush=True)


def _without_times(reading: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reading.items() if k not in ("computed_at", "as_of", "now")}


def _write_report(name: str, report: dict[str, Any]) -> None:
    print(f"\n{name}: {json.dumps(report, indent=2)}")
    if REPORT:
        path = Path(REPORT)
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing[name] = report
        path.write_text(json.dumps(existing, indent=2) + "\n")


def test_three_lost_primaries_lose_nothing_acknowledged(tmp_path: Path) -> None:
    began = time.monotonic()
    with (
        formations.formation(logs=tmp_path / "formation") as formation,
        _calmon_on(formation, tmp_path) as server,
    ):
        status, _ = server.call("POST", "/v1/contracts/fit", fit_body(MODEL))
        assert status == 201
        load = Load(server.url, ADMIN_TOKEN, fit_body(AUDITED_MODEL))
        load.start()
        _say(began, "formation up, calmon serving, load started")
        failovers: list[Failover] = []
        try:
            for _ in range(3):
                time.sleep(5)
                assert not load.failures, load.failures
                lost = formation.primary()
                survivor = formation.other(lost)
                counts, retried, rewritten = (
                    _status_counts(server),
                    load.rows_retried(),
                    load.write_retries(),
                )
                loss = time.monotonic()
                formation.lose_host(lost)
                unready = server.call("GET", "/readyz")
                promoted = formation.wait_promoted(survivor)
                _say(began, f"{lost.name} lost, {survivor.name} promoted")
                load.first_write_after(loss, timeout=60)
                _say(began, "writes resumed")
                alone = server.call("GET", "/readyz")
                formation.rejoin(lost)
                formation.wait_healthy(timeout=120)
                _say(began, f"{lost.name} back as a standby")
                ready = server.call("GET", "/readyz")
                assert unready[0] == 503 and unready[1]["error"]["code"] == "database_unavailable"
                assert alone[0] == 200, alone
                assert any("no synchronous standby" in w for w in alone[1]["warnings"]), alone
                assert ready == (200, {"status": "ready", "database": "postgresql"}), ready
                time.sleep(2)
                after = _status_counts(server)
                failovers.append(
                    Failover(
                        lost=lost.name,
                        promoted=survivor.name,
                        seconds_to_promotion=round(promoted - loss, 1),
                        seconds_without_write=round(load.seconds_without_write(loss), 1),
                        replies_503=int(after.get("503", 0) - counts.get("503", 0)),
                        rows_retried=load.rows_retried() - retried,
                        writes_retried=load.write_retries() - rewritten,
                    )
                )
        finally:
            sent = load.stop()
        _say(began, "load stopped")
        _assert_every_row_sent(sent, load)
        stored = _verify_everything(server, load, formation.sqlalchemy_url())
        _say(began, "verified")
        counts = _status_counts(server)
        duration = load.stopped_at - load.started_at
        report = {
            "failovers": [asdict(f) for f in failovers],
            "stored": stored,
            "offered_rows_per_second": load.rows_per_second,
            "rows_per_second": round((len(load.predictions) + len(load.labels)) / duration),
            "replies_by_status": counts,
            "seconds": round(time.monotonic() - began),
        }
        _write_report("host_loss", report)
        server_errors = {s: n for s, n in counts.items() if s.startswith("5") and s != "503"}
        assert not server_errors, server_errors
        for failover in failovers:
            assert failover.seconds_without_write <= RESUME_SECONDS, failovers


@pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
def test_a_partitioned_primary_acknowledges_nothing_it_could_lose(tmp_path: Path) -> None:
    began = time.monotonic()
    network = netns.Network()
    with (
        formations.formation(network, logs=tmp_path / "formation") as formation,
        _calmon_on(formation, tmp_path, CALMON_COMMIT_SECONDS=str(COMMIT_SECONDS)) as server,
    ):
        status, _ = server.call("POST", "/v1/contracts/fit", fit_body(MODEL))
        assert status == 201
        load = Load(server.url, ADMIN_TOKEN, fit_body(AUDITED_MODEL), rows_per_second=1200)
        load.start()
        _say(began, "formation up, calmon serving, load started")
        try:
            time.sleep(6)
            isolated = formation.primary()
            survivor = formation.other(isolated)
            counts = _status_counts(server)
            cut = time.monotonic()
            formation.isolate(isolated)
            promoted = formation.wait_promoted(survivor, timeout=PARTITION_SECONDS)
            _say(began, f"{isolated.name} cut off, {survivor.name} promoted")
            time.sleep(max(0.0, cut + PARTITION_SECONDS - time.monotonic()))
            healed = time.monotonic()
            formation.heal(isolated)
            formation.wait_healthy(timeout=120)
            _say(began, f"partition healed, {isolated.name} back as a standby")
            load.first_write_after(cut, timeout=60)
            _say(began, "writes go on")
            time.sleep(2)
            after = _status_counts(server)
        finally:
            formation.heal(formation.node("node1"))
            formation.heal(formation.node("node2"))
            sent = load.stop()
        _say(began, "load stopped")
        _assert_every_row_sent(sent, load)
        during = load.replies_between(cut, healed)
        statuses: dict[str, int] = {}
        for r in during:
            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        slowest = max((r.seconds for r in during), default=0.0)
        stored = _verify_everything(server, load, formation.sqlalchemy_url())
        assert formation.states()[isolated.name] == ("secondary", "secondary")
        report = {
            "isolated": isolated.name,
            "seconds_to_promotion": round(promoted - cut, 1),
            "seconds_without_write": round(load.seconds_without_write(cut), 1),
            "probe_replies_during_partition": statuses,
            "slowest_reply_seconds": round(slowest, 1),
            "replies_503": int(after.get("503", 0) - counts.get("503", 0)),
            "rows_retried": load.rows_retried(),
            "writes_retried": load.write_retries(),
            "stored": stored,
            "replies_by_status": after,
        }
        _write_report("partition", report)
        assert slowest < PARTITION_SECONDS / 2, report
        server_errors = {s: n for s, n in after.items() if s.startswith("5") and s != "503"}
        assert not server_errors, server_errors
