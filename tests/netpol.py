"""An independent reading of Kubernetes NetworkPolicy semantics, for the tests: does a connection pass?

Written from the API's documentation, not from fleetops's model: a pod is isolated for a direction
when any policy selecting it lists that direction in policyTypes; an isolated pod's connection
passes when some rule of a policy selecting it matches the peer and the port; a connection needs
both the source's egress and the destination's ingress. Peers: podSelector (in the policy's
namespace), namespaceSelector (namespaces' labels, `kubernetes.io/metadata.name` included), both
(pods of matching namespaces), ipBlock (addresses outside the cluster, with `except`). Selectors
with matchExpressions and named ports are refused rather than guessed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Host:
    """An address outside the cluster."""

    address: str


Party = Pod | Host


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector beyond matchLabels: {selector}")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


class Policies:
    def __init__(self, manifests: Iterable[dict[str, Any]], namespace_labels: dict[str, dict[str, str]]):
        self.policies = [m for m in manifests if m.get("kind") == "NetworkPolicy"]
        self.namespace_labels = namespace_labels

    def _ns_labels(self, name: str) -> dict[str, str]:
        return {**self.namespace_labels.get(name, {}), "kubernetes.io/metadata.name": name}

    def _peer_matches(self, peer: dict[str, Any], policy_ns: str, other: Party) -> bool:
        if "ipBlock" in peer:
            if not isinstance(other, Host):
                return False
            address = ipaddress.ip_address(other.address)
            block = peer["ipBlock"]
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except", []))
        if not isinstance(other, Pod):
            return False
        if "namespaceSelector" in peer:
            if not _selects(peer["namespaceSelector"], self._ns_labels(other.namespace)):
                return False
        elif other.namespace != policy_ns:
            return False
        return _selects(peer.get("podSelector", {}), other.labels)

    @staticmethod
    def _port_matches(ports: list[dict[str, Any]], port: int, protocol: str) -> bool:
        if not ports:
            return True
        for p in ports:
            if not isinstance(p.get("port", 0), int):
                raise ValueError(f"named port: {p}")
            if p.get("protocol", "TCP") != protocol:
                continue
            if "port" not in p or p["port"] <= port <= p.get("endPort", p["port"]):
                return True
        return False

    def _side_allows(self, pod: Pod, other: Party, port: int, protocol: str, direction: str) -> bool:
        field_name, kind = ("from", "Ingress") if direction == "ingress" else ("to", "Egress")
        selecting = [p for p in self.policies if p["metadata"]["namespace"] == pod.namespace
                     and _selects(p["spec"].get("podSelector", {}), pod.labels)
                     and kind in p["spec"].get("policyTypes", ["Ingress"])]
        if not selecting:
            return True
        for policy in selecting:
            for rule in policy["spec"].get(direction, []):
                peers = rule.get(field_name)
                if (not peers or any(self._peer_matches(peer, policy["metadata"]["namespace"], other) for peer in peers)) \
                        and self._port_matches(rule.get("ports", []), port, protocol):
                    return True
        return False

    def allows(self, source: Party, destination: Party, port: int, protocol: str = "TCP") -> bool:
        out = not isinstance(source, Pod) or self._side_allows(source, destination, port, protocol, "egress")
        into = not isinstance(destination, Pod) or self._side_allows(destination, source, port, protocol, "ingress")
        return out and into
