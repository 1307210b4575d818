"""The policy input: the document every policy reads as `input`, and the facts derived for it."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from fleetops import grants, spec
from fleetops.errors import PolicyError
from fleetops.inventory import LiveNode
from fleetops.kube import object_key
from fleetops.render import DesiredState


class StrictModel(BaseModel):
    """What the policy gate reads from a file (live inventory, waivers): an unknown field is refused, not dropped."""

    model_config = ConfigDict(extra="forbid")


class Inventory(StrictModel):
    """The live nodes the policies read (`input.live`): fleetops.inventory says what a live node is."""

    nodes: list[LiveNode]


class PolicyInput(BaseModel):
    """The document every policy reads as `input` (policies/README.md describes each field)."""

    model_config = ConfigDict(extra="forbid")

    environment: str
    revision: str
    spec: dict[str, Any]
    resources: list[dict[str, Any]]
    by_kind: dict[str, list[int]]
    facts: dict[str, Any]
    live: Inventory | None = None
    change: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None  # fleetops.usage.Usage: measured use of what a plan's change touches


def load_inventory(path: Path) -> Inventory:
    """`--live INVENTORY.json`: a list of nodes or `{"nodes": [...]}`; errors name file:line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}:1:1: cannot read the live inventory: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}:1:1: the live inventory is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise PolicyError(f"{path}:1:1: the live inventory is nested too deeply (deeper than Python's recursion limit)") from None
    try:
        return Inventory.model_validate({"nodes": raw} if isinstance(raw, list) else raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"{path}:1:1: {where}: {first['msg']}") from None


def resource_entry(cluster: str, manifest: dict[str, Any]) -> dict[str, Any]:
    _, api_version, kind, namespace, name = object_key(cluster, manifest)
    return {"cluster": cluster, "kind": kind, "apiVersion": api_version, "name": name, "namespace": namespace, "manifest": manifest}


def _group_fact(cluster: str, group: spec.Group) -> dict[str, Any]:
    sharing = group.sharing if isinstance(group, spec.Pool) else None
    return {
        "cluster": cluster,
        "kind": "pool" if isinstance(group, spec.Pool) else "edge_group",
        "model": group.device.model,
        "resource": group.device.resource,
        "physical_devices": spec.physical_devices(group),
        "sharing": sharing.mode if sharing else "exclusive",
        "replicas": sharing.replicas if sharing else None,
        "units": spec.group_capacity(group),
    }


def derived_facts(env: spec.Environment) -> dict[str, Any]:
    """Facts an auditor can recompute from the environment file; policies compare against them."""
    quota = spec.quota_sums(env)
    holders: dict[tuple[str, str], int] = {}
    for tenant in env.tenants:
        for cluster in tenant.clusters:
            for resource, q in tenant.quota.items():
                if q.guaranteed > 0:
                    holders[cluster, resource] = holders.get((cluster, resource), 0) + 1
    clusters = {c.name: c for c in env.clusters}
    return {
        "capacity": spec.capacity(env),
        "quota": {
            c: {r: {**sums, "tenants": holders.get((c, r), 0)} for r, sums in per.items()} for c, per in quota.items()
        },
        "monthly_cost": spec.monthly_cost(env),
        "hours_per_month": spec.HOURS_PER_MONTH,
        "groups": {g.name: _group_fact(c.name, g) for c in env.clusters for g in (*c.pools, *c.edge_groups)},
        "eligible": {
            t.name: {c: [g.name for g in spec.eligible_groups(t, [clusters[c]])] for c in t.clusters if c in clusters}
            for t in env.tenants
        },
    }


def _egress_blocks(manifest: Any) -> Iterator[str]:
    """The CIDR of every egress IP block of a NetworkPolicy, whatever program wrote it: a part that is
    not the documented shape has no block to count, and the schema check refuses it anyway."""
    body = manifest.get("spec") if isinstance(manifest, dict) else None
    rules = body.get("egress") if isinstance(body, dict) else None
    for rule in rules if isinstance(rules, list) else []:
        peers = rule.get("to") if isinstance(rule, dict) else None
        for peer in peers if isinstance(peers, list) else []:
            block = peer.get("ipBlock") if isinstance(peer, dict) else None
            if isinstance(block, dict) and "cidr" in block:
                yield str(block["cidr"])


# IPv6 ranges whose addresses carry an IPv4 address that a translator or relay delivers to: each with the
# bit where the embedded address starts and whether it is written inverted. Egress to such a block reaches
# IPv4 hosts as much as egress to their IPv4 blocks does, whatever its share of the IPv6 space.
_IPV4_EMBEDDED = (
    (ipaddress.IPv6Network("64:ff9b::/96"), 96, False),    # NAT64's well-known prefix (RFC 6052)
    # NAT64's local-use prefix (RFC 8215): the operator chooses where in it the IPv4 address sits; at
    # bit 96 a block reaches the most IPv4 addresses, so that is where it is counted.
    (ipaddress.IPv6Network("64:ff9b:1::/48"), 96, False),
    (ipaddress.IPv6Network("::ffff:0:0:0/96"), 96, False),  # IPv4-translated (SIIT, RFC 2765)
    (ipaddress.IPv6Network("::/96"), 96, False),            # IPv4-compatible (RFC 4291, deprecated)
    (ipaddress.IPv6Network("2002::/16"), 16, False),        # 6to4 (RFC 3056)
    (ipaddress.IPv6Network("2001::/32"), 96, True),         # Teredo's client address, inverted (RFC 4380)
)


def ipv4_reached(network: ipaddress.IPv6Network) -> list[ipaddress.IPv4Network]:
    """The IPv4 addresses an IPv6 block reaches through the translators of _IPV4_EMBEDDED."""
    reached = []
    for embedding, start, inverted in _IPV4_EMBEDDED:
        if not network.overlaps(embedding):
            continue
        inner = network if network.prefixlen >= embedding.prefixlen else embedding
        fixed = min(max(inner.prefixlen - start, 0), 32)  # the bits of the IPv4 address the block fixes
        bits = (int(inner.network_address) >> (96 - start)) & 0xFFFFFFFF
        if inverted:
            bits ^= 0xFFFFFFFF
        reached.append(ipaddress.IPv4Network((bits >> (32 - fixed) << (32 - fixed) if fixed else 0, fixed)))
    return reached


def _union(networks: list[Any], bits: int) -> dict[str, Any]:
    union = list(ipaddress.collapse_addresses(networks))
    return {"cidrs": [str(n) for n in union], "share": sum(n.num_addresses for n in union) / 2**bits}


def egress_coverage(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """"cluster/namespace" -> the share of the IPv4 and IPv6 address spaces its NetworkPolicies' egress IP
    blocks reach together, for `network.egress_anywhere`.

    Arithmetic, not strings: 0.0.0.0/1 + 128.0.0.0/1 is all of IPv4 as much as 0.0.0.0/0 is, and two
    overlapping blocks count once (their union). Neither engine can merge CIDRs (regorus lacks
    net.cidr_merge), so the union is computed here and the rule compares the share with its data.
    `except` is not subtracted: the share is an upper bound, so an exception never hides a wide block.
    A CIDR that does not parse cannot be measured and is listed as invalid (the rule denies it).
    `translated` adds to the IPv4 blocks what the IPv6 blocks reach through NAT64, SIIT, 6to4 or Teredo
    (`ipv4_reached`): 64:ff9b::/96 is all of IPv4 through a NAT64 gateway, in 2^-96 of IPv6.
    """
    blocks: dict[tuple[str, str], list[str]] = {}
    for entry in entries:
        if entry["kind"] == "NetworkPolicy":
            blocks.setdefault((entry["cluster"], entry["namespace"]), []).extend(_egress_blocks(entry["manifest"]))
    out: dict[str, dict[str, Any]] = {}
    for (cluster, namespace), cidrs in sorted(blocks.items()):
        if not cidrs:
            continue
        families: dict[int, list[Any]] = {4: [], 6: []}  # collapse_addresses takes one version at a time
        invalid = []
        for cidr in cidrs:
            try:
                network = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                invalid.append(cidr)
                continue
            if network.version == 6 and network.network_address.ipv4_mapped is not None and network.prefixlen >= 96:
                # ::ffff:0.0.0.0/96 is all of IPv4 to a Go CNI (net.IPNet unmaps it): count it there.
                network = ipaddress.ip_network((network.network_address.ipv4_mapped, network.prefixlen - 96))
            families[network.version].append(network)
        fact: dict[str, Any] = {"cluster": cluster, "namespace": namespace, "invalid": sorted(set(invalid))}
        for version, networks in families.items():
            fact[f"ipv{version}"] = _union(networks, 32 if version == 4 else 128)
        through = {str(n): ipv4_reached(n) for n in families[6]}
        fact["translated"] = {"through": sorted(cidr for cidr, reached in through.items() if reached),
                              **_union([*families[4], *(r for reached in through.values() for r in reached)], 32)}
        out[f"{cluster}/{namespace}"] = fact
    return out


def reach_fact(env: spec.Environment) -> dict[str, Any]:
    """`facts.reach`: per tenant namespace ("cluster/namespace"), each flow into and out of it (spec.reach,
    the one network model render reads too) as the other end and its ports ("443/TCP"; none: every
    port), and each end once as the NetworkPolicy peer it is rendered as ("itself": its own pods). The
    Rego judges the rendered policies against this instead of deriving the pairs from the allow lists
    again. Ends are named, not repeated: the generated fleet's 4,000 flows take 0.2 MB so."""
    sides: dict[str, dict[str, list[dict[str, Any]]]] = {}
    peers: dict[str, Any] = {"itself": {"podSelector": {}}}
    for flow in spec.reach(env).flows:
        for end, other, direction in ((flow.destination, flow.source, "ingress"), (flow.source, flow.destination, "egress")):
            if end.kind is not spec.Kind.TENANT:
                continue
            name = "itself" if other == end else other.label
            if name not in peers:
                peers[name] = other.peer()
            entry = sides.setdefault(f"{flow.cluster}/{end.name}", {"ingress": [], "egress": []})
            entry[direction].append({"peer": name, "ports": flow.port_words()})
    return {"peers": peers, "namespaces": sides}


def build_input(
    env: spec.Environment,
    resources: Iterable[dict[str, Any]],
    revision: str,
    live: Inventory | None = None,
    change: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
    granted: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The policy input as plain data. Spec and resources are already validated upstream. `granted` is
    `grants.of_entries(resources)` when the caller has it already (a plan reads Kueue's grants once)."""
    if change is not None and not isinstance(change, dict):
        raise PolicyError(f"the change under review must be an object, got {type(change).__name__}")
    entries = list(resources)
    granted = grants.of_entries(entries) if granted is None else granted
    by_kind: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        by_kind.setdefault(entry["kind"], []).append(i)
    return {
        "environment": env.environment,
        "revision": revision,
        # A spill-over appears where a tenant declares one: a null per tenant would take the largest fleet's input past its bound.
        # Reconciler pins likewise (no policy reads them): a file without pins judges the same input as before they existed.
        "spec": env.model_dump(mode="json", exclude={"tenants": {i: {"spill_over"} for i, t in enumerate(env.tenants) if t.spill_over is None},
                                                     **({} if env.reconciler.pins else {"reconciler": {"pins"}})}),
        "resources": entries,
        "by_kind": by_kind,
        "facts": {**derived_facts(env), "egress": egress_coverage(entries), "reach": reach_fact(env), "grants": granted, "services": grants.services(env, granted)},
        "live": live.model_dump(mode="json") if live is not None else None,
        "change": change,
        "usage": usage,
    }


def deleted_input(environment: str, revision: str, change: dict[str, Any] | None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The policy input of an environment the change under review deletes: the shape `build_input`
    makes, with no spec, objects or facts (only the change rules have anything to judge)."""
    return {"environment": environment, "revision": revision, "spec": None, "resources": [], "by_kind": {}, "facts": None,
            "live": None, "change": change, "usage": usage}


def policy_input(
    env: spec.Environment, state: DesiredState, live: Inventory | None = None, change: dict[str, Any] | None = None
) -> dict[str, Any]:
    return build_input(env, (resource_entry(c, m) for c, m in state.objects()), state.revision, live, change)
