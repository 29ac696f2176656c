"""Hosts in network namespaces of their own, for tests that cut a link (needs root and
``ip`` from iproute2).

Two bridges in the test's own namespace: the formation network, on which the hosts reach each
other, and the client network, on which the test process (and the calmon it runs) reaches the
hosts that have a client address. Each host is a namespace with one veth pair per network;
``cut`` sets a host's formation link down (the host keeps its client address), ``mend`` sets it
up again. Addresses are in 10.213.0.0/16, a range used here only inside these namespaces.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

PREFIX = "10.213"
#: The hosts' TCP gives up on a silent peer within seconds, not the kernel's default quarter of
#: an hour: a keeper whose query to the monitor went unanswered when its link was cut notices,
#: demotes its node, and reconnects as soon as the link is back.
TCP_SETTINGS = (
    "net.ipv4.tcp_retries2=5",
    "net.ipv4.tcp_keepalive_time=5",
    "net.ipv4.tcp_keepalive_intvl=2",
    "net.ipv4.tcp_keepalive_probes=3",
)


def ip(*args: str, netns: str | None = None) -> None:
    command = (["ip", "netns", "exec", netns, "ip"] if netns else ["ip"]) + list(args)
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def available() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"ip netns does not work here: {exc}"
    return None


@dataclass
class Network:
    """The two bridges and the hosts on them; ``remove`` deletes everything it made."""

    tag: str = field(default_factory=lambda: f"{os.getpid() % 10000:04d}")
    hosts: list[str] = field(default_factory=list)
    subnet: int = field(default_factory=lambda: 2 * (os.getpid() % 100))
    made: bool = False

    def _make(self) -> None:
        for bridge, address in ((self._bridge("f"), None), (self._bridge("c"), self._client(1))):
            ip("link", "add", bridge, "type", "bridge")
            if address:
                ip("addr", "add", f"{address}/24", "dev", bridge)
            ip("link", "set", bridge, "up")
        self.made = True

    def _bridge(self, kind: str) -> str:
        return f"cb{kind}{self.tag}"

    def _formation(self, index: int) -> str:
        return f"{PREFIX}.{self.subnet}.{index}"

    def _client(self, index: int) -> str:
        return f"{PREFIX}.{self.subnet + 1}.{index}"

    def namespace(self, name: str) -> str:
        return f"calmon{self.tag}{name}"

    def _veth(self, kind: str, name: str) -> str:
        return f"v{kind}{self.tag}{self.hosts.index(name)}"

    def add_host(self, name: str, *, client: bool) -> str:
        """A namespace for ``name`` on the formation network (and on the client network when
        ``client``); its name."""
        if not self.made:
            self._make()
        self.hosts.append(name)
        netns = self.namespace(name)
        index = 10 + self.hosts.index(name)
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
        ip("link", "set", "lo", "up", netns=netns)
        for name_value in TCP_SETTINGS:
            subprocess.run(
                ["ip", "netns", "exec", netns, "sysctl", "-q", "-w", name_value],
                check=True,
                capture_output=True,
            )
        kinds = ("f", "c") if client else ("f",)
        for kind in kinds:
            outside = self._veth(kind, name)
            inside = f"eth{kind}"
            ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns)
            ip("link", "set", outside, "master", self._bridge(kind))
            ip("link", "set", outside, "up")
            address = self._formation(index) if kind == "f" else self._client(index)
            ip("addr", "add", f"{address}/24", "dev", inside, netns=netns)
            ip("link", "set", inside, "up", netns=netns)
        return netns

    def formation_address(self, name: str) -> str:
        return self._formation(10 + self.hosts.index(name))

    def client_address(self, name: str) -> str:
        return self._client(10 + self.hosts.index(name))

    def cut(self, name: str) -> None:
        """Set ``name``'s formation link down: it reaches neither the monitor nor the other
        hosts, and they do not reach it."""
        ip("link", "set", self._veth("f", name), "down")

    def mend(self, name: str) -> None:
        ip("link", "set", self._veth("f", name), "up")

    def remove(self) -> None:
        """Delete the veth pairs, the namespaces and the bridges (a namespace can outlive its
        deletion while the kernel still holds it, and its veth pairs with it)."""
        for name in self.hosts:
            for kind in ("f", "c"):
                subprocess.run(["ip", "link", "del", self._veth(kind, name)], capture_output=True)
            subprocess.run(["ip", "netns", "del", self.namespace(name)], capture_output=True)
        for kind in ("f", "c"):
            subprocess.run(["ip", "link", "del", self._bridge(kind)], capture_output=True)
        self.hosts.clear()
        self.made = False
