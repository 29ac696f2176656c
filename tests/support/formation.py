"""A pg_auto_failover formation for tests: a monitor and two PostgreSQL nodes (a primary and a
synchronous standby) on free ports under a temporary directory of its own (owned by
``postgres``, so not under pytest's ``tmp_path``, which only root may enter), run by
``pg_autoctl`` as the ``postgres`` user.

Each ``pg_autoctl`` process runs in a session of its own, so ``lose_host`` kills a node's keeper,
its postmaster and every backend together (the host is gone, not only its postmaster, which the
keeper would restart). ``XDG_CONFIG_HOME`` and ``XDG_DATA_HOME`` point into the formation's
directory, so the keepers' state stays there and a formation leaves nothing under the
``postgres`` user's home.

The monitor's health checks and timeouts are shortened (``MONITOR_SETTINGS``) and so are the
nodes' replication timeouts (``NODE_SETTINGS``): docs/operations.md explains each.

A formation can live in network namespaces (``tests.support.netns.Network``): each node then has
an address on a formation network shared with the monitor and another on a client network that
the test process reaches, so ``isolate`` cuts a node off from the monitor and the other node
while its clients still reach it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support.netns import Network

PG_AUTOCTL = shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"
SOCKET_DIR = "/var/run/postgresql"
DATABASE = "calmon"

#: The monitor's failure detection: a health check each second that gives up after one second
#: and one retry half a second later; a node that has not reported for 4 s is unhealthy; the
#: standby is promoted 5 s after the primary was asked to demote without confirming it.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "4000",
    "pgautofailover.primary_demote_timeout": "5000",
}
#: A node notices a silent peer within seconds (the defaults wait a minute), so a primary cut
#: off from its standby stops listing it as connected and its keeper demotes it (after the
#: keeper's ``timeout.network_partition_timeout``, 20 s, without the monitor).
NODE_SETTINGS = {
    "wal_sender_timeout": "5s",
    "wal_receiver_timeout": "5s",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def available() -> str | None:
    """Why a formation cannot be built here, or None."""
    if os.geteuid() != 0:
        return "a formation runs pg_autoctl as the postgres user: needs root"
    if not Path(PG_AUTOCTL).exists():
        return "pg_autoctl is not installed (Debian's pg-auto-failover-cli)"
    if not Path(postgres_bindir(), "pg_ctl").exists():
        return "PostgreSQL's server binaries are not installed"
    return None


def postgres_bindir() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else Path("/usr/lib/postgresql/15/bin")


def session_processes(sid: int) -> list[int]:
    """The pids of every process in session ``sid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:
            found.append(int(stat.parent.name))
    return found


@dataclass
class Node:
    """One PostgreSQL node of the formation and its keeper."""

    name: str
    pgdata: Path
    port: int
    host: str
    client_host: str
    netns: str | None = None
    process: subprocess.Popen[bytes] | None = None
    runs: int = 0

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection as ``postgres`` over the node's Unix socket (reachable whatever its
        network does)."""
        return psycopg.connect(
            host=SOCKET_DIR, port=self.port, user="postgres", dbname=DATABASE, **kwargs
        )


@dataclass
class Formation:
    """A monitor and two nodes; ``start`` builds it, ``stop`` ends every process."""

    network: Network | None = None
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="calmon-formation-")))
    nodes: list[Node] = field(default_factory=list)
    monitor_port: int = 0
    monitor_host: str = "127.0.0.1"
    monitor_process: subprocess.Popen[bytes] | None = None
    monitor_netns: str | None = None
    log: Callable[[str], None] = print

    # -- building ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {
            "PATH": f"{postgres_bindir()}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "data"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "PG_CONFIG": str(postgres_bindir() / "pg_config"),
            "LANG": "C.UTF-8",
        }

    def _command(self, args: list[str], netns: str | None) -> list[str]:
        """``args`` as the ``postgres`` user, in namespace ``netns`` (entered as root)."""
        inside = ["ip", "netns", "exec", netns] if netns else []
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        return inside + as_postgres + args

    def _spawn(self, args: list[str], netns: str | None, log_name: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{log_name}.log").open("ab")
        try:
            return subprocess.Popen(
                self._command(args, netns),
                env=self._env(),
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        finally:
            log.close()

    def _autoctl(self, *args: str, netns: str | None = None) -> str:
        done = subprocess.run(
            self._command([PG_AUTOCTL, *args], netns),
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def start(self, timeout: float = 240.0) -> None:
        """Build the monitor, the first node (primary) and the second (its synchronous standby),
        then wait for ``primary`` and ``secondary``."""
        for sub in ("config", "data", "run"):
            (self.root / sub).mkdir(exist_ok=True)
        shutil.chown(self.root, "postgres", "postgres")
        for sub in ("config", "data", "run"):
            shutil.chown(self.root / sub, "postgres", "postgres")
        os.chmod(self.root / "run", 0o700)
        deadline = time.monotonic() + timeout
        self.monitor_port = free_port()
        monitor_netns = None
        if self.network is not None:
            monitor_netns = self.network.add_host("monitor", client=False)
            self.monitor_host = self.network.formation_address("monitor")
        self.monitor_netns = monitor_netns
        self._autoctl(
            "create",
            "monitor",
            "--pgdata",
            str(self.root / "monitor"),
            "--pgport",
            str(self.monitor_port),
            "--hostname",
            self.monitor_host,
            "--auth",
            "trust",
            "--no-ssl",
            netns=monitor_netns,
        )
        self._trust_everyone(self.root / "monitor")
        self.monitor_process = self._spawn(
            [PG_AUTOCTL, "run", "--pgdata", str(self.root / "monitor")], monitor_netns, "monitor"
        )
        self._wait(lambda: self._monitor_sql("SELECT 1"), deadline, "the monitor")
        for name, value in MONITOR_SETTINGS.items():
            self._monitor_sql(f"ALTER SYSTEM SET {name} = '{value}'")
        self._monitor_sql("SELECT pg_reload_conf()")
        for index in (1, 2):
            name = f"node{index}"
            netns = host = client_host = None
            if self.network is not None:
                netns = self.network.add_host(name, client=True)
                host = self.network.formation_address(name)
                client_host = self.network.client_address(name)
            node = Node(
                name=name,
                pgdata=self.root / name,
                port=free_port(),
                host=host or "127.0.0.1",
                client_host=client_host or "127.0.0.1",
                netns=netns,
            )
            self.nodes.append(node)
            self._create_node(node)
            if index == 1:
                self._wait(
                    lambda: self.states().get("node1") == ("single", "single"),
                    deadline,
                    "the first node",
                )
                self._tune(node)
        self.wait_healthy(deadline - time.monotonic())

    def _trust_everyone(self, pgdata: Path) -> None:
        """Trust every address (a test formation on addresses of its own)."""
        with (pgdata / "pg_hba.conf").open("a") as hba:
            hba.write("host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n")

    def _create_node(self, node: Node) -> None:
        monitor = (
            f"postgres://autoctl_node@{self.monitor_host}:{self.monitor_port}"
            "/pg_auto_failover?sslmode=disable"
        )
        args = [
            PG_AUTOCTL,
            "create",
            "postgres",
            "--pgdata",
            str(node.pgdata),
            "--pgport",
            str(node.port),
            "--hostname",
            node.host,
            "--name",
            node.name,
            "--dbname",
            DATABASE,
            "--monitor",
            monitor,
            "--auth",
            "trust",
            "--no-ssl",
            "--run",
        ]
        node.process = self._spawn(args, node.netns, node.name)
        node.runs += 1

    def _tune(self, node: Node) -> None:
        """The first node's settings (the second copies them in its base backup)."""
        self._trust_everyone(node.pgdata)
        with node.connect(autocommit=True) as conn:
            for name, value in NODE_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    # -- observing ---------------------------------------------------------------------------

    def _monitor_sql(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            host=SOCKET_DIR,
            port=self.monitor_port,
            user="postgres",
            dbname="pg_auto_failover",
            autocommit=True,
            connect_timeout=3,
        ) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's reported and assigned state, as the monitor has them."""
        rows = self._monitor_sql(
            "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
        )
        return {name: (reported, goal) for name, reported, goal in rows}

    def primary(self) -> Node:
        """The node the monitor has as primary (or wait_primary)."""
        for name, (reported, goal) in self.states().items():
            if goal in ("primary", "wait_primary") and reported == goal:
                return self.node(name)
        raise LookupError(f"no primary: {self.states()}")

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def other(self, node: Node) -> Node:
        return next(n for n in self.nodes if n is not node)

    def _wait(self, check: Callable[[], Any], deadline: float, what: str) -> Any:
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                value = check()
            except (psycopg.Error, OSError, LookupError, RuntimeError) as exc:
                last, value = exc, None
            if value:
                return value
            self._nudge()
            time.sleep(0.5)
        raise TimeoutError(f"timed out waiting for {what}: {self._describe()} ({last})")

    def _nudge(self) -> None:
        """A checkpoint on the primary while a standby waits for its base backup
        (``pg_basebackup`` otherwise waits for a spread checkpoint, minutes on an idle node)."""
        try:
            states = self.states()
        except psycopg.Error:
            return
        if not any(goal == "catchingup" for _, goal in states.values()):
            return
        for name, (reported, _) in states.items():
            if reported in ("single", "wait_primary", "primary"):
                try:
                    with self.node(name).connect(autocommit=True, connect_timeout=2) as conn:
                        conn.execute("CHECKPOINT")
                except psycopg.Error:
                    pass

    def _describe(self) -> str:
        try:
            return json.dumps(self.states())
        except psycopg.Error as exc:
            return f"monitor unreachable: {exc}"

    def wait_healthy(self, timeout: float = 120.0) -> Node:
        """Wait until one node is primary and the other secondary; the primary."""
        deadline = time.monotonic() + timeout

        def healthy() -> bool:
            states = sorted(self.states().values())
            return states == [("primary", "primary"), ("secondary", "secondary")]

        self._wait(healthy, deadline, "a primary and a secondary")
        return self.primary()

    def wait_promoted(self, node: Node, timeout: float = 60.0) -> float:
        """Wait until ``node`` is the primary (alone or not); its monotonic time."""
        deadline = time.monotonic() + timeout
        self._wait(
            lambda: self.states().get(node.name, ("", ""))[0] in ("wait_primary", "primary"),
            deadline,
            f"{node.name} to be promoted",
        )
        return time.monotonic()

    # -- failures ----------------------------------------------------------------------------

    def lose_host(self, node: Node) -> None:
        """Kill the node's keeper, its postmaster and every backend at once (SIGKILL)."""
        assert node.process is not None
        sid = node.process.pid
        for _ in range(5):
            pids = session_processes(sid)
            if not pids:
                break
            for pid in pids:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        node.process.wait(timeout=10)

    def rejoin(self, node: Node) -> None:
        """Start the lost node's keeper again: it rewinds the node and follows the new primary."""
        node.process = self._spawn(
            [PG_AUTOCTL, "run", "--pgdata", str(node.pgdata)], node.netns, node.name
        )
        node.runs += 1

    def isolate(self, node: Node) -> None:
        """Cut ``node`` off the formation network (from the monitor and the other node)."""
        assert self.network is not None
        self.network.cut(node.name)

    def heal(self, node: Node) -> None:
        assert self.network is not None
        self.network.mend(node.name)

    # -- connecting --------------------------------------------------------------------------

    def sqlalchemy_url(self) -> str:
        """The multi-host URL in the form SQLAlchemy takes."""
        hosts = "&".join(f"host={n.client_host}:{n.port}" for n in self.nodes)
        return f"postgresql+psycopg://postgres@/{DATABASE}?{hosts}&target_session_attrs=read-write"

    def libpq_uri(self) -> str:
        """The formation's URI as ``pg_autoctl show uri --formation default`` prints it."""
        out = self._autoctl(
            "show",
            "uri",
            "--formation",
            "default",
            "--monitor",
            f"postgres://autoctl_node@{self.monitor_host}:{self.monitor_port}/pg_auto_failover",
            netns=self.monitor_netns,
        )
        return out.strip()

    # -- ending ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every process of the formation."""
        processes = [n.process for n in self.nodes] + [self.monitor_process]
        for process in processes:
            if process is None or process.poll() is not None:
                continue
            for pid in session_processes(process.pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait(timeout=10)
        if self.network is not None:
            self.network.remove()

    def keep_logs(self, folder: Path) -> None:
        """Copy the keepers' and the monitor's logs to ``folder`` (before ``remove``)."""
        folder.mkdir(parents=True, exist_ok=True)
        for log in self.root.glob("*.log"):
            shutil.copy(log, folder / log.name)

    def remove(self) -> None:
        """Delete the formation's directory (after ``stop``)."""
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def formation(
    network: Network | None = None, logs: Path | None = None, **kwargs: Any
) -> Iterator[Formation]:
    """A started formation in a fresh temporary directory, stopped and deleted afterwards (its
    logs copied to ``logs`` first, when given)."""
    built = Formation(network, **kwargs)
    try:
        built.start()
        yield built
    finally:
        built.stop()
        if logs is not None:
            built.keep_logs(logs)
        built.remove()
