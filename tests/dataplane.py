"""A real NetworkPolicy dataplane for the tests: kube-router's network-policy controller (iptables and
ipset, firewall only) against a real kube-apiserver, with pods and outside hosts as network namespaces.

Topology, all in namespaces this module makes (the machine's own iptables are never touched): a
"node" namespace joined to this one by a veth pair (tests/netns.py), where kube-router runs and reaches
the API server on this side's address; each pod and each outside host a namespace of its own with a
veth into the node, its address a /32 routed there (the node answers ARP for the rest: proxy_arp), so
every connection between two of them crosses the node's FORWARD chain, where kube-router filters it.
There is no kubelet: the Node object carries the node's address, and each Pod is bound to it with its
address written into its status through the API, which is all kube-router reads.

Probes are real connections from a party's namespace: a TCP connect, or a UDP datagram its peer
echoes. A socket belongs to the namespace of the thread that created it: each probe's thread enters
the source's namespace (setns(2)) just for the socket call. kube-router refuses what no policy allows
(REJECT: the connect is refused at once); a bounded timeout covers anything dropped.
"""

from __future__ import annotations

import contextlib
import secrets
import selectors
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import spec
from tests import servers
from tests.netmatrix import Party
from tests.netns import NetnsHost, inside, netns_host

NODE = "fleetops-node"
PROBE_TIMEOUT = 2.0  # seconds a probe may wait: a refusal is immediate, so only a dropped packet waits this long


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _sysctl(namespace: str, key: str, value: str) -> None:
    subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-qw", f"{key}={value}"], check=True, capture_output=True, timeout=30)


@dataclass
class Listeners:
    """Every party's listening sockets, answered by one thread: TCP accepted and closed, UDP echoed."""

    selector: selectors.DefaultSelector = field(default_factory=selectors.DefaultSelector)
    sockets: list[socket.socket] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def listen(self, namespace: str, port: spec.Port) -> None:
        udp = port.protocol is spec.Protocol.UDP
        with inside(namespace):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port.number))
        if not udp:
            sock.listen(256)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, udp)
        self.sockets.append(sock)

    def _serve(self) -> None:
        while not self.stopped.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                with contextlib.suppress(OSError):
                    if key.data:
                        data, peer = sock.recvfrom(512)
                        sock.sendto(data, peer)
                    else:
                        sock.accept()[0].close()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._serve, name="listeners", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        for sock in self.sockets:
            self.selector.unregister(sock)
            sock.close()
        self.selector.close()


def connect(namespace: str, address: str, port: spec.Port) -> str:
    """One probe from `namespace`: "open", or why not ("refused", "unreachable", "timeout")."""
    udp = port.protocol is spec.Protocol.UDP
    with inside(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
    with sock:
        sock.settimeout(PROBE_TIMEOUT)
        try:
            sock.connect((address, port.number))
            if udp:
                sock.send(b"probe")
                return "open" if sock.recv(64) == b"probe" else "garbled"
            return "open"
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "timeout"
        except OSError as exc:
            return "unreachable" if exc.errno in (113, 101) else f"error {exc.errno}"


class Wire:
    """The node namespace with kube-router in it, and the parties of one matrix at a time."""

    def __init__(self, api: servers.ApiServer, node: NetnsHost, directory: Path):
        self.api, self.node, self.directory = api, node, directory
        self.tag = secrets.token_hex(3)
        self.parties: dict[str, str] = {}  # address -> its namespace
        self.links: list[str] = []  # the node's end of each party's veth pair
        self.listeners: Listeners | None = None
        self.kube_router: servers.Process | None = None
        from kubernetes import client

        self.core = client.CoreV1Api(api.client())
        self.networking = client.NetworkingV1Api(api.client())
        self.apply = servers.applier(api)

    def start(self) -> None:
        _sysctl(self.node.namespace, "net.ipv4.ip_forward", "1")
        # Every refusal answered at once: the kernel's ICMP rate limit would drop some of a burst of
        # rejections to one source, and their probes would wait out the timeout instead.
        _sysctl(self.node.namespace, "net.ipv4.icmp_ratelimit", "0")
        self.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        self.core.patch_node_status(NODE, {"status": {"addresses": [{"type": "InternalIP", "address": self.node.address}]}})
        kubeconfig = self.api.kubeconfig(self.directory / "kube-router.kubeconfig")
        self.kube_router = servers.Process("kube-router", self.node.command([
            str(servers.tool("kube-router")), f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
            "--enable-ipv6=false", "--health-port=0", "--v=1",
        ]), self.directory).start()

    def stop(self) -> None:
        self.clear()
        if self.kube_router is not None:
            self.kube_router.stop()

    def _attach(self, index: int, address: str) -> str:
        namespace, outer = f"fo{self.tag}-{index}", f"fo{self.tag}p{index}"
        _ip("netns", "add", namespace)
        self.parties[address] = namespace
        self.links.append(outer)
        _ip("link", "add", outer, "netns", self.node.namespace, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("-n", namespace, "addr", "add", f"{address}/32", "dev", "eth0")
        for ns, link in ((namespace, "lo"), (namespace, "eth0"), (self.node.namespace, outer)):
            _ip("-n", ns, "link", "set", link, "up")
        _ip("-n", namespace, "route", "add", "default", "dev", "eth0")
        _sysctl(self.node.namespace, f"net.ipv4.conf.{outer}.proxy_arp", "1")
        _ip("-n", self.node.namespace, "route", "add", f"{address}/32", "dev", outer)
        return namespace

    def set_up(self, parties: list[Party], manifests: list[dict[str, Any]], monitoring: str) -> None:
        """The cluster's namespaces and NetworkPolicies as rendered, its parties' namespaces and listeners, its pods."""
        for m in manifests:
            if m["kind"] == "Namespace":
                self.apply(m)
        for name in {p.namespace for p in parties if p.namespace} | {monitoring}:
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            self.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}})
        for m in manifests:
            if m["kind"] == "NetworkPolicy":
                self.apply(m)
        self.listeners = Listeners()
        for i, party in enumerate(parties):
            namespace = self._attach(i, party.address)
            for port in party.ports:
                self.listeners.listen(namespace, port)
        self.listeners.start()
        for i, party in enumerate(parties):
            if party.namespace is None:
                continue
            name = f"probe-{i}"
            self.core.create_namespaced_pod(party.namespace, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": party.labels},
                "spec": {"nodeName": NODE, "automountServiceAccountToken": False,
                         "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}})
            self.core.patch_namespaced_pod_status(name, party.namespace, {"status": {
                "phase": "Running", "hostIP": self.node.address, "podIP": party.address, "podIPs": [{"ip": party.address}]}})

    def clear(self) -> None:
        """No pods, no NetworkPolicies, no parties: ready for the next cluster's matrix."""
        for policy in self.networking.list_network_policy_for_all_namespaces().items:
            self.networking.delete_namespaced_network_policy(policy.metadata.name, policy.metadata.namespace)
        for pod in self.core.list_pod_for_all_namespaces().items:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        if self.listeners is not None:
            self.listeners.stop()
            self.listeners = None
        # The node's end first, which takes the pair and its route with it at once: a deleted namespace
        # is freed later, by the kernel's own worker, and its pair with it.
        for link in self.links:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("-n", self.node.namespace, "link", "del", link)
        for namespace in self.parties.values():
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", namespace)
        self.parties.clear()
        self.links.clear()

    def reachable_from_node(self, parties: list[Party]) -> list[str]:
        """Every listener, probed from the node (which kube-router lets reach its pods): what does not answer."""
        return [f"{p.label} :{port}" for p in parties for port in p.ports if connect(self.node.namespace, p.address, port) != "open"]

    def probe(self, pairs: list[tuple[Party, Party, spec.Port]]) -> list[str]:
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(lambda cell: connect(self.parties[cell[0].address], cell[1].address, cell[2]), pairs))


def available() -> None:
    """Skip (or, in CI, fail) without what the dataplane needs."""
    for command in ("ip", "iptables", "ipset"):
        if shutil.which(command) is None:
            servers.missing(f"no {command}: the NetworkPolicy dataplane (kube-router) needs iproute2, iptables and ipset")
    servers.tool("kube-router")


@contextlib.contextmanager
def dataplane(etcd: servers.Etcd, directory: Path) -> Iterator[Wire]:
    """A kube-apiserver and kube-router's firewall on a node namespace: one for a whole matrix run."""
    available()
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(netns_host())
        api = servers.ApiServer("network", directory / "kube", etcd, address=node.host_address)
        stack.callback(api.stop)
        api.start()
        wire = Wire(api, node, directory)
        stack.callback(wire.stop)
        wire.start()
        yield wire
