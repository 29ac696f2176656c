"""What a benchmark phase cost the machine: CPU by process group, WAL, checkpoints, disk reads.

``snapshot(url, service_pid)`` reads cumulative counters; ``Phase.between(a, b)`` the difference,
printed as one table row by ``phase_table``. CPU seconds come from ``/proc`` (user + system of
every ``postgres`` process, of the calmon service's process tree, and of this client process),
so a phase that kept both cores busy shows about ``2 x wall`` seconds in all.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, fields
from pathlib import Path

import psycopg

from service.db.database import make_engine

_TICK = os.sysconf("SC_CLK_TCK")

#: The server settings a stream benchmark depends on, printed with its results.
SETTINGS = (
    "shared_buffers",
    "wal_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "work_mem",
    "synchronous_commit",
    "autovacuum",
    "jit",
)


def _parsed_stat(raw: str) -> tuple[int, str, float]:
    """``(parent pid, command, cpu seconds)`` of one ``/proc/<pid>/stat`` text."""
    rest = raw[raw.rindex(")") + 2 :].split()
    cpu = (int(rest[11]) + int(rest[12])) / _TICK
    return int(rest[1]), raw[raw.index("(") + 1 : raw.rindex(")")], cpu


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by the process ``pid``."""
    return _parsed_stat(Path(f"/proc/{pid}/stat").read_text())[2]


def _processes() -> list[tuple[int, int, str, float]]:
    """``(pid, parent pid, command, cpu seconds)`` of every process readable in /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
        except OSError:
            continue
        found.append((int(stat.parent.name), *_parsed_stat(raw)))
    return found


def process_tree(root: int, procs: list[tuple[int, int, str, float]] | None = None) -> set[int]:
    """``root`` and every process descending from it."""
    procs = _processes() if procs is None else procs
    tree = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent, _, _ in procs:
            if parent in tree and pid not in tree:
                tree.add(pid)
                changed = True
    return tree


def cpu_seconds(service_pid: int) -> tuple[float, float]:
    """CPU seconds used so far by PostgreSQL's processes and by the service's process tree."""
    procs = _processes()
    postgres = sum(cpu for _, _, command, cpu in procs if command.startswith("postgres"))
    tree = process_tree(service_pid, procs)
    service = sum(cpu for pid, _, _, cpu in procs if pid in tree)
    return postgres, service


@dataclass(frozen=True)
class Counters:
    """Cumulative counters at one moment."""

    wall: float
    postgres_cpu: float
    service_cpu: float
    client_cpu: float
    wal_bytes: float
    wal_buffers_full: float
    checkpoints: float
    temp_bytes: float
    blocks_read: float


def snapshot(url: str, service_pid: int) -> Counters:
    """The counters now; ``url`` names the benchmark's database."""
    postgres, service = cpu_seconds(service_pid)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with psycopg.connect(url, autocommit=True) as conn:
        wal = conn.execute("SELECT wal_bytes, wal_buffers_full FROM pg_stat_wal").fetchone()
        checkpoints = conn.execute(
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        ).fetchone()
        db = conn.execute(
            "SELECT temp_bytes, blks_read FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert wal and checkpoints and db
    return Counters(
        time.perf_counter(),
        postgres,
        service,
        usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime,
        float(wal[0]),
        float(wal[1]),
        float(checkpoints[0]),
        float(db[0]),
        float(db[1]),
    )


def between(before: Counters, after: Counters) -> Counters:
    """What happened between two snapshots."""
    return Counters(*(getattr(after, f.name) - getattr(before, f.name) for f in fields(Counters)))


def phase_table(phases: list[tuple[str, Counters]]) -> str:
    """A markdown table: wall time, CPU by process group (share of the machine), WAL, checkpoints,
    temporary-file bytes and blocks read from outside shared buffers, per phase."""
    cores = os.cpu_count() or 1
    lines = [
        "| phase | wall s | calmon CPU s | PostgreSQL CPU s | client CPU s | machine busy |"
        " WAL MB | WAL buffers full | checkpoints | temp MB | blocks read |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in phases:
        busy = (c.service_cpu + c.postgres_cpu + c.client_cpu) / (cores * c.wall)
        lines.append(
            f"| {name} | {c.wall:.1f} | {c.service_cpu:.1f} | {c.postgres_cpu:.1f} |"
            f" {c.client_cpu:.1f} | {busy:.0%} | {c.wal_bytes / 2**20:,.0f} |"
            f" {c.wal_buffers_full:,.0f} | {c.checkpoints:.0f} | {c.temp_bytes / 2**20:,.0f} |"
            f" {c.blocks_read:,.0f} |"
        )
    return "\n".join(lines)


def server_settings(url: str) -> str:
    """The ``SETTINGS`` as ``name=value`` pairs, as a connection of calmon's sees them (calmon
    sets ``jit`` on every connection it opens)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return ", ".join(
                f"{name}={connection.exec_driver_sql(f'SHOW {name}').scalar_one()}"
                for name in SETTINGS
            )
    finally:
        engine.dispose()
