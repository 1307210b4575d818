"""Who may talk to whom on each cluster, and on which ports: the environment's network intent, one model.

A `Flow` lets a source open connections to a destination (and take the replies). It is computed here
once from the environment file and read by everything that says what the network does: the parts
render both ends of every flow from it (the destination's ingress and the source's egress, where each
is isolated: a flow rendered on one side only never passes), the policy input carries it (the Rego
checks the rendered NetworkPolicies against it instead of deriving it again from the allow lists),
the plan lists the flows a change opens or closes, and the dataplane test's expectations are it.

What is isolated: every tenant's namespace (its `allow-same-namespace` policy selects all its pods for
ingress and egress, whatever `network.default_deny` says, so each opening needs a rule) and fleetops's
own workloads (the reconciler, the fleet API). The cluster's DNS, the monitoring namespace, kube-system
and everything outside the cluster are not policed by fleetops: a flow to or from them is rendered on
the isolated side only.
"""

import enum
import ipaddress
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fleetops.kube import NAME_LABEL
from fleetops.spec.fields import Cluster, Environment, Tenant

RECONCILER = "fleetops-reconciler"
API = "fleetops-api"
RECONCILER_METRICS_PORT = 9090
DNS_PORT = 53


class Protocol(enum.StrEnum):
    TCP = "TCP"
    UDP = "UDP"


@dataclass(frozen=True, order=True)
class Port:
    number: int
    protocol: Protocol = Protocol.TCP

    def __str__(self) -> str:
        return f"{self.number}" if self.protocol is Protocol.TCP else f"{self.number}/{self.protocol}"



class Kind(enum.StrEnum):
    """What a flow's end is."""

    TENANT = "tenant"  # every pod of a tenant's namespace
    WORKLOAD = "workload"  # fleetops's own pods: `name` in `namespace`
    NAMESPACE = "namespace"  # every pod of a namespace fleetops does not police (monitoring)
    DNS = "dns"  # the cluster's DNS: kube-dns in kube-system
    BLOCK = "block"  # addresses outside the cluster: a center endpoint, an egress CIDR, the API's clients
    ANY = "any"  # every destination


class Reason(enum.StrEnum):
    """Which declaration a flow comes from: the parts name their NetworkPolicies by it."""

    SAME = "same-namespace"
    DNS = "dns"
    TENANT = "tenants"  # allow_from_tenants
    ENDPOINT = "endpoint"  # allow_to_endpoints
    CIDR = "egress-cidrs"  # egress_cidrs
    CONTROL = "control"  # fleetops's own workloads to the API server and the Git host
    METRICS = "metrics"  # the monitoring namespace scrapes the reconciler
    CLIENTS = "clients"  # api.allow_from
    PROMETHEUS = "prometheus"  # the fleet API reads the metering Prometheus


@dataclass(frozen=True, order=True)
class End:
    kind: Kind
    name: str = ""  # tenant, workload, namespace or endpoint name; a block's CIDR when it has no name
    namespace: str = ""  # a workload's namespace
    cidr: str = ""  # a block's

    @property
    def isolated(self) -> bool:
        """Policed by fleetops's NetworkPolicies: every connection in or out needs a rule."""
        return self.kind in (Kind.TENANT, Kind.WORKLOAD)

    def peer(self) -> dict[str, Any] | None:
        """This end as a NetworkPolicy peer (None: every destination, a rule without `to`)."""
        if self.kind in (Kind.TENANT, Kind.NAMESPACE):
            return namespace_peer(self.name)
        if self.kind is Kind.WORKLOAD:
            return {**namespace_peer(self.namespace), "podSelector": {"matchLabels": {NAME_LABEL: self.name}}}
        if self.kind is Kind.DNS:
            return {**namespace_peer("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
        if self.kind is Kind.BLOCK:
            return {"ipBlock": {"cidr": self.cidr}}
        return None

    def __str__(self) -> str:
        if self.kind is Kind.WORKLOAD:
            return f"{self.namespace}/{self.name}"
        if self.kind is Kind.BLOCK:
            return f"{self.name} ({self.cidr})" if self.name != self.cidr else self.cidr
        if self.kind is Kind.NAMESPACE:
            return f"namespace {self.name}"
        if self.kind is Kind.DNS:
            return "cluster DNS"
        return self.name or str(self.kind)

    @property
    def label(self) -> str:
        """Its name with its kind, unique among the ends of an environment (the policy input's key for it)."""
        return f"tenant {self.name}" if self.kind is Kind.TENANT else str(self)


def namespace_peer(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


DNS = End(Kind.DNS, "dns")
ANYWHERE = End(Kind.ANY, "anywhere")
DNS_PORTS = (Port(DNS_PORT, Protocol.UDP), Port(DNS_PORT, Protocol.TCP))
# The API server and the Git host: HTTPS, the API server's own port, SSH.
CONTROL_PORTS = (Port(443), Port(6443), Port(22))


def tenant(name: str) -> End:
    return End(Kind.TENANT, name)


def workload(name: str, namespace: str) -> End:
    return End(Kind.WORKLOAD, name, namespace)


def block(cidr: str, name: str = "") -> End:
    return End(Kind.BLOCK, name or cidr, cidr=cidr)


@dataclass(frozen=True, order=True)
class Flow:
    cluster: str
    source: End
    destination: End
    ports: tuple[Port, ...] = ()  # none: every port of every protocol
    reason: Reason = field(default=Reason.SAME, compare=False)

    def admits(self, port: Port) -> bool:
        return not self.ports or port in self.ports

    def port_words(self) -> list[str]:
        """Its ports as the policy input writes them: "443/TCP"."""
        return [f"{p.number}/{p.protocol}" for p in self.ports]


@dataclass(frozen=True)
class Reach:
    """Every flow of an environment, and each isolated end's flows by cluster."""

    flows: tuple[Flow, ...]
    into: dict[tuple[str, End], tuple[Flow, ...]]  # (cluster, destination) -> its ingress flows
    out_of: dict[tuple[str, End], tuple[Flow, ...]]  # (cluster, source) -> its egress flows

    def ingress(self, cluster: str, end: End) -> tuple[Flow, ...]:
        return self.into.get((cluster, end), ())

    def egress(self, cluster: str, end: End) -> tuple[Flow, ...]:
        return self.out_of.get((cluster, end), ())

    def allows(self, cluster: str, source: End, destination: End, port: Port) -> bool:
        """Whether a connection from `source` to `destination` on `port` passes: out of an isolated source
        only along one of its flows, into an isolated destination only along one of its flows. An
        address outside the cluster is a block of its own (`block("10.20.0.7/32")`), inside a flow's block."""
        out = not source.isolated or any(f.admits(port) and _takes_in(f.destination, destination) for f in self.egress(cluster, source))
        into = not destination.isolated or any(f.admits(port) and _takes_in(f.source, source) for f in self.ingress(cluster, destination))
        return out and into


def _takes_in(declared: End, actual: End) -> bool:
    """A flow's end names `actual`: the same end, every destination, or a block holding its addresses."""
    if declared == actual or declared.kind is Kind.ANY:
        return True
    if declared.kind is not Kind.BLOCK or actual.kind is not Kind.BLOCK:
        return False
    inner, outer = ipaddress.ip_network(actual.cidr), ipaddress.ip_network(declared.cidr)
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _tenant_flows(env: Environment, cluster: Cluster, on_cluster: dict[str, Tenant]) -> Iterator[Flow]:
    endpoints = {e.name: e for e in env.network.center_endpoints}
    for t in on_cluster.values():
        me = tenant(t.name)
        yield Flow(cluster.name, me, me, (), Reason.SAME)
        if env.network.allow_dns:
            yield Flow(cluster.name, me, DNS, DNS_PORTS, Reason.DNS)
        # A pair exists where both tenants do: another cluster's namespace of that name is another tenant's.
        for other in sorted(set(t.network.allow_from_tenants)):
            if other in on_cluster and other != t.name:
                yield Flow(cluster.name, tenant(other), me, (), Reason.TENANT)
        for cidr in sorted(set(t.network.egress_cidrs)):
            yield Flow(cluster.name, me, block(cidr), (), Reason.CIDR)
        for name in sorted(set(t.network.allow_to_endpoints)):
            e = endpoints[name]
            yield Flow(cluster.name, me, block(e.cidr, e.name), tuple(sorted(Port(p) for p in set(e.ports))), Reason.ENDPOINT)


def _own_flows(env: Environment, cluster: Cluster) -> Iterator[Flow]:
    ns = env.reconciler.namespace
    monitoring = End(Kind.NAMESPACE, env.monitoring.namespace)
    own = [workload(RECONCILER, ns)]
    if env.api is not None and env.api.cluster == cluster.name:
        own.append(workload(API, ns))
    for w in own:
        yield Flow(cluster.name, w, DNS, DNS_PORTS, Reason.DNS)
        yield Flow(cluster.name, w, ANYWHERE, CONTROL_PORTS, Reason.CONTROL)
    yield Flow(cluster.name, monitoring, own[0], (Port(RECONCILER_METRICS_PORT),), Reason.METRICS)
    if len(own) > 1 and env.api is not None:
        api = own[1]
        for cidr in env.api.allow_from:
            yield Flow(cluster.name, block(cidr), api, (Port(env.api.port),), Reason.CLIENTS)
        if env.api.prometheus:
            yield Flow(cluster.name, api, monitoring, (Port(prometheus_port(env.api.prometheus)),), Reason.PROMETHEUS)


def prometheus_port(url: str) -> int:
    """The port of the metering Prometheus's URL (its scheme's when it names none)."""
    parts = urllib.parse.urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def reach(env: Environment) -> Reach:
    """The environment's flows on every cluster, computed once per environment object."""
    cached = env.reach_cache.get("reach")
    if cached is not None:
        return cached
    out: list[Flow] = []
    for cluster in env.clusters:
        on_cluster = {t.name: t for t in env.tenants if cluster.name in t.clusters}
        out += _tenant_flows(env, cluster, on_cluster)
        out += _own_flows(env, cluster)
    into: dict[tuple[str, End], list[Flow]] = {}
    out_of: dict[tuple[str, End], list[Flow]] = {}
    for f in out:
        if f.destination.isolated:
            into.setdefault((f.cluster, f.destination), []).append(f)
        if f.source.isolated:
            out_of.setdefault((f.cluster, f.source), []).append(f)
    made = Reach(tuple(out), {k: tuple(v) for k, v in into.items()}, {k: tuple(v) for k, v in out_of.items()})
    env.reach_cache["reach"] = made
    return made
