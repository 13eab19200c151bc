"""Throw-away network namespaces for the tests: processes that reach the host over a virtual link.

:class:`Namespaces` creates ``count`` namespaces and one bridge on the host with the address
``.1`` of a /24 of its own (picked in 10.200.0.0–10.250.255.0 from the creating pid, skipping any
/24 the host already uses, so pytest-xdist workers never collide). Namespace ``i`` is joined to
the bridge by a veth pair: the host end ``kn<pid>h<i>`` is a bridge port, the other end lives in
the namespace with address ``.<i + 2>``. ``lo`` is up inside. A server bound on :attr:`host` is
reached from every namespace over its veth, and only over it: ``cut(i)`` takes that link down.

Every name starts with ``kn<pid>`` (at most 12 characters, under the 15 of an interface name).
:meth:`Namespaces.start` first removes namespaces and links of that shape whose creating pid is
dead (a SIGKILLed pytest leaves them behind); :meth:`Namespaces.stop` ends the processes left
inside the namespaces, deletes the host ends (which deletes their peers), the bridge and the
namespaces. Both ignore what is already gone; ``stop`` is safe to call twice.

Creating a namespace needs root (CAP_NET_ADMIN) and iproute2's ``ip``: when it fails,
:class:`NetnsUnavailable` says why in one line, and the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

_PREFIX = "kn"
_OURS = re.compile(rf"^{_PREFIX}(\d+)[bhpn]\d*$")
_NO_IP = "no `ip` command (iproute2) to create network namespaces"
_SUBNETS = 51 * 256  # 10.200.0.0/24 … 10.250.255.0/24


class NetnsUnavailable(Exception):
    """Network namespaces cannot be created here (the message says why, in one line)."""


@dataclass(frozen=True)
class Namespace:
    name: str  # for ``ip netns exec``
    host_end: str  # the veth end on the host: a port of the bridge
    address: str  # this namespace's address on the link


def _ip(*argv: str, check: bool = True) -> str:
    try:
        done = subprocess.run(
            ["ip", *argv], capture_output=True, text=True, check=False, timeout=30
        )
    except FileNotFoundError:
        if check:
            raise NetnsUnavailable(_NO_IP) from None
        return ""
    if check and done.returncode != 0:
        reason = (done.stderr.strip() or f"exit {done.returncode}").splitlines()[0]
        raise NetnsUnavailable(f"`ip {' '.join(argv)}` failed: {reason}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespace_names() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line]


def _link_names() -> list[str]:
    # "7: kn123h0@if6: <BROADCAST,...": the name is the second field, without "@peer" and ":"
    names = []
    for line in _ip("-o", "link", "show", check=False).splitlines():
        fields = line.split()
        if len(fields) > 1:
            names.append(fields[1].rstrip(":").split("@", 1)[0])
    return names


def _end_processes(namespace: str) -> None:
    """SIGTERM what runs inside ``namespace`` (processes a test started there), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = [int(p) for p in _ip("netns", "pids", namespace, check=False).split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        # a teardown's escalation, not a wait that fails: what outlives it gets the next signal
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.05)
        if not pids:
            return


def remove_stale() -> list[str]:
    """Delete the namespaces and links a dead pid created (``kn<pid>…``); returns their names."""
    removed = []
    for name in _link_names():  # host ends first: deleting one deletes its peer too
        match = _OURS.match(name)
        if match and not _alive(int(match[1])) and name in _link_names():
            _ip("link", "delete", name, check=False)
            removed.append(name)
    for name in _namespace_names():
        match = _OURS.match(name)
        if match and not _alive(int(match[1])):
            _end_processes(name)
            _ip("netns", "delete", name, check=False)
            removed.append(name)
    return removed


def _used_networks() -> list[ipaddress.IPv4Network]:
    used = []
    for line in _ip("-o", "-4", "addr", "show", check=False).splitlines():
        fields = line.split()
        if "inet" in fields:
            used.append(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show", check=False).splitlines():
        target = line.split()[0] if line else ""
        with contextlib.suppress(ValueError):
            if target != "default":
                used.append(ipaddress.IPv4Network(target, strict=False))
    return used


def pick_subnet(pid: int, used: Sequence[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /24 of 10.200–10.250 from ``pid``'s own starting point that overlaps none of
    ``used``: different pids start at different /24s."""
    for step in range(_SUBNETS):
        n = (pid + step) % _SUBNETS
        candidate = ipaddress.IPv4Network(f"10.{200 + n // 256}.{n % 256}.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise NetnsUnavailable("every /24 of 10.200.0.0-10.250.255.0 is in use on this host")


class Namespaces:
    """``count`` network namespaces joined to one host bridge (see the module docstring)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pid = os.getpid()
        self.bridge = f"{_PREFIX}{self.pid}b"
        self.namespaces: list[Namespace] = []
        self.network = ipaddress.IPv4Network("10.200.0.0/24")
        self._created: list[tuple[str, str]] = []  # ("link" | "netns", name), in creation order

    @property
    def host(self) -> str:
        """The host's address on the link: bind servers here."""
        return str(self.network[1])

    @property
    def interface(self) -> str:
        """:attr:`host` with the link's prefix length, e.g. ``10.201.7.1/24``."""
        return f"{self.host}/{self.network.prefixlen}"

    def start(self) -> Namespaces:
        if shutil.which("ip") is None:
            raise NetnsUnavailable(_NO_IP)
        remove_stale()
        self.network = pick_subnet(self.pid, _used_networks())
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        return self

    def _build(self) -> None:
        first = f"{_PREFIX}{self.pid}n0"
        _ip("netns", "add", first)  # the probe: fails without root / CAP_NET_ADMIN
        self._created.append(("netns", first))
        _ip("link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        _ip("addr", "add", self.interface, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self.count):
            name, host_end, peer = (f"{_PREFIX}{self.pid}{k}{i}" for k in "nhp")
            if i:
                _ip("netns", "add", name)
                self._created.append(("netns", name))
            _ip("link", "add", host_end, "type", "veth", "peer", "name", peer)
            self._created.append(("link", host_end))
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("link", "set", peer, "netns", name)
            address = str(self.network[i + 2])
            inside = ("netns", "exec", name, "ip")
            _ip(*inside, "addr", "add", f"{address}/{self.network.prefixlen}", "dev", peer)
            _ip(*inside, "link", "set", peer, "up")
            _ip(*inside, "link", "set", "lo", "up")
            self.namespaces.append(Namespace(name, host_end, address))

    def stop(self) -> None:
        """End the processes inside, delete every link and namespace created; never raises."""
        created, self._created = self._created, []
        for kind, name in reversed(created):
            if kind == "netns":
                _end_processes(name)
                _ip("netns", "delete", name, check=False)
            else:
                _ip("link", "delete", name, check=False)

    def exec(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside namespace ``i`` (same pid: ``ip netns exec`` execs, no fork)."""
        return ["ip", "netns", "exec", self.namespaces[i].name, *argv]

    def cut(self, i: int) -> None:
        """Take namespace ``i``'s link down (its host end): it reaches nothing any more."""
        _ip("link", "set", self.namespaces[i].host_end, "down")

    def __enter__(self) -> Namespaces:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
