"""The test's own host: a network namespace joined to this one by a veth pair.

Some real parts refuse loopback: the API server proxies an aggregated API (custom.metrics.k8s.io,
external.metrics.k8s.io) only to an endpoint address it accepts, and it rejects 127.0.0.0/8. A server
run inside this namespace listens on `address`; the servers it calls listen on `host_address`, the
other end of the pair. The /30 is picked from 10.200.0.0/16 so that it overlaps nothing this
machine already routes, and the namespace and both ends of the pair are deleted when the block ends,
whatever happened inside it. Needs `ip` (iproute2) and CAP_NET_ADMIN; a test without them is skipped
(or, in CI, failed: servers.missing).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tests import servers

# Private space for test hosts (RFC 1918), clear of the API server's service range (10.0.0.0/24).
POOL = ipaddress.ip_network("10.200.0.0/16")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class NetnsHost:
    namespace: str
    address: str  # inside the namespace
    host_address: str  # this side of the pair

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace (ip netns exec execs it: its pid is the server's)."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30).stdout


def _routed() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address or a route in."""
    nets = [ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
            for link in json.loads(_ip("-j", "-4", "addr")) for a in link.get("addr_info", [])]
    for route in json.loads(_ip("-j", "-4", "route")):
        if route.get("dst", "default") != "default":
            nets.append(ipaddress.ip_network(route["dst"], strict=False))
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network)]


def free_subnet() -> ipaddress.IPv4Network:
    """A random /30 of POOL that overlaps nothing routed here (random: tests on one machine rarely collide)."""
    used = _routed()
    for _ in range(64):
        start = POOL.network_address + 4 * random.randrange(POOL.num_addresses // 4)
        subnet = ipaddress.ip_network(f"{start}/30")
        if not any(subnet.overlaps(n) for n in used):
            return subnet
    raise RuntimeError(f"no free /30 in {POOL}")


@contextlib.contextmanager
def netns_host() -> Iterator[NetnsHost]:
    if shutil.which("ip") is None:
        servers.missing("no ip (iproute2): the test host is a network namespace")
    tag = secrets.token_hex(4)
    namespace, outer, inner = f"fleetops-{tag}", f"fo{tag}h", f"fo{tag}n"  # link names: at most 15 characters
    subnet = free_subnet()
    host_address, address = (str(a) for a in subnet.hosts())
    try:
        _ip("netns", "add", namespace)
    except subprocess.CalledProcessError as exc:
        servers.missing(f"cannot create a network namespace (needs CAP_NET_ADMIN): {exc.stderr.strip()}")
    try:
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("addr", "add", f"{host_address}/{subnet.prefixlen}", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", inner)
        _ip("-n", namespace, "link", "set", inner, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield NetnsHost(namespace, address, host_address)
    finally:
        # Deleting the namespace deletes its end of the pair, and with it this end; the explicit
        # delete covers a pair whose inner end never moved into the namespace.
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", outer)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", namespace)


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """This thread in the network namespace `namespace` (ip netns's /run/netns/NAME) for the block: a socket made in it
    belongs to that namespace for good, whichever thread then serves it."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
        yield
    finally:
        if _libc.setns(own, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        os.close(own)
        os.close(target)
