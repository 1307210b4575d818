"""The probe matrix of one cluster of an environment: who probes whom on which port, and what the
environment's network intent (fleetops.spec.reach) expects of each cell.

Parties, each with an address the dataplane test gives it: one pod per tenant (per edge group for a
tenant on an edge cluster: its pods run on that group's nodes) and a second pod of the tenant (the
"itself" cell: a pod reaching itself never leaves its own network stack), fleetops's own workloads
(the reconciler; the fleet API on its cluster), the cluster's DNS, a pod of the monitoring namespace,
each edge group's model cache (kube-system); outside the cluster, a host in each declared endpoint
and egress CIDR, a client of the fleet API (api.allow_from) and an address nothing allows.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from fleetops import kube, spec
from fleetops.spec.intent import prometheus_port

SERVICE_PORT = 8080  # what a tenant's pods serve: "speech <- vision :8080"
NOWHERE = "198.51.100.10"  # TEST-NET-2: declared by no environment
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")


@dataclass(frozen=True)
class Party:
    label: str
    end: spec.End
    address: str
    namespace: str | None = None  # a pod's; None: a host outside the cluster
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    ports: tuple[spec.Port, ...] = ()  # what it listens on
    source: bool = True  # probes from it
    twin: bool = False  # a tenant's second pod: probed from its own tenant only

    @property
    def pod(self) -> bool:
        return self.namespace is not None


@dataclass(frozen=True)
class Cell:
    source: Party
    destination: Party
    port: spec.Port
    expected: bool


def _inside(cidr: str) -> str:
    """The last address of a block (its highest usable one): clear of the narrower blocks declared at its start."""
    network = ipaddress.ip_network(cidr)
    return str(network[-2] if network.num_addresses > 2 else network[0])


def parties(env: spec.Environment, cluster: spec.Cluster) -> list[Party]:
    pods = iter(POD_NETWORK.hosts())
    out: list[Party] = []

    def pod(label: str, end: spec.End, namespace: str, labels: dict[str, str], ports: tuple[spec.Port, ...], twin: bool = False) -> None:
        out.append(Party(label, end, str(next(pods)), namespace, labels, ports, not twin, twin))

    service = (spec.Port(SERVICE_PORT),)
    groups = {g.name for g in cluster.edge_groups}
    for tenant in env.tenants:
        if cluster.name not in tenant.clusters:
            continue
        end = spec.End(spec.Kind.TENANT, tenant.name)
        own_groups = [g for g in tenant.edge_groups if g in groups]
        for where in own_groups or [""]:
            pod(f"{tenant.name}@{where}" if where else tenant.name, end, tenant.name, {"app": "probe"}, service)
        pod(f"{tenant.name}#2", end, tenant.name, {"app": "twin"}, service, twin=True)
    ns = env.reconciler.namespace
    pod(spec.RECONCILER, spec.End(spec.Kind.WORKLOAD, spec.RECONCILER, ns), ns, {kube.NAME_LABEL: spec.RECONCILER},
        (spec.Port(spec.RECONCILER_METRICS_PORT),))
    if env.api is not None and env.api.cluster == cluster.name:
        pod(spec.API, spec.End(spec.Kind.WORKLOAD, spec.API, ns), ns, {kube.NAME_LABEL: spec.API}, (spec.Port(env.api.port),))
    pod("dns", spec.End(spec.Kind.DNS, "dns"), "kube-system", {"k8s-app": "kube-dns"}, (spec.Port(53, spec.Protocol.UDP),))
    monitoring = env.monitoring.namespace
    prometheus = prometheus_port(env.api.prometheus) if env.api is not None and env.api.prometheus else 9090
    pod("monitoring", spec.End(spec.Kind.NAMESPACE, monitoring), monitoring, {"app": "prometheus"}, (spec.Port(prometheus),))
    for group in cluster.edge_groups:
        pod(f"model-cache@{group.name}", spec.End(spec.Kind.NAMESPACE, "kube-system"), "kube-system",
            {"app.kubernetes.io/name": "fleetops-model-cache", kube.EDGE_GROUP_LABEL: group.name}, service)

    def host(label: str, address: str, ports: tuple[spec.Port, ...], source: bool = False) -> None:
        out.append(Party(label, spec.End(spec.Kind.BLOCK, label, cidr=f"{address}/32"), address, None, {}, ports, source))

    reach = spec.reach(env)
    blocks = {f.destination: f for f in reach.flows if f.cluster == cluster.name and f.destination.kind is spec.Kind.BLOCK}
    for end, flow in sorted(blocks.items()):
        # Each declared port, and one the declaration leaves shut.
        declared = flow.ports or service
        host(str(end), _inside(end.cidr), tuple(sorted({*declared, spec.Port(max(p.number for p in declared) + 1)})))
    for f in reach.flows:
        if f.cluster == cluster.name and f.source.kind is spec.Kind.BLOCK:
            host(f"client {f.source}", _inside(f.source.cidr), service, source=True)
    host("nowhere", NOWHERE, (spec.Port(443), spec.Port(SERVICE_PORT)), source=True)
    return out


def cells(env: spec.Environment, cluster: spec.Cluster, everyone: list[Party]) -> list[Cell]:
    """Every source to every destination party and port, but a pod to itself and another tenant's second pod."""
    reach = spec.reach(env)
    out = []
    for source in everyone:
        if not source.source:
            continue
        for destination in everyone:
            if destination == source or (destination.twin and destination.end != source.end):
                continue
            for port in destination.ports:
                out.append(Cell(source, destination, port, reach.allows(cluster.name, source.end, destination.end, port)))
    return out
