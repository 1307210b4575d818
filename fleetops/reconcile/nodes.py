"""Nodes and kubelet certificate requests: labels, taints, quarantine, cordon, approvals, and the live facts the gate sees."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fleetops import identity, inventory, spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError
from fleetops.kube import CORDON_ANNOTATION, MANAGER, PART_OF, QUARANTINE_TAINT, Manifest
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import Action, ClusterResult, Found, Verb, Write
from fleetops.reconcile.retry import call, explain

NODE_KIND = ("v1", "Node")


# --- nodes ----------------------------------------------------------------------------------


def _has(taints: list[dict[str, str]], taint: dict[str, str]) -> bool:
    return any(t["key"] == taint["key"] and t["effect"] == taint["effect"] and t.get("value", "") == taint.get("value", "") for t in taints)


def node_plan(group: spec.Group, node: inventory.NodeInfo, now: dt.datetime,
              record: dict[str, str] | None = None) -> tuple[Manifest, list[tuple[Verb, str]]]:
    """The merge patch that makes a member node meet its group's contract, and what it means.

    Returns (patch, [(verb, detail)]): a `Write` is in the patch, a `Found` is only said. Labels merge key by key; taints are sent whole, with
    the node's resourceVersion as a precondition, so a taint another controller added since the
    read is not lost (the write gets 409 and the next pass starts from a fresh read).
    """
    notes: list[tuple[Verb, str]] = []
    labels = {k: v for k, v in spec.node_labels(group).items() if node.labels.get(k) != v}
    if labels:
        notes.append((Write.LABEL, ", ".join(f"{k}={v}" for k, v in labels.items())))
    taints = [dict(t) for t in node.taints]
    for taint in (t.model_dump() for t in spec.taints(group)):
        if not _has(taints, taint):
            taints = [t for t in taints if not (t["key"] == taint["key"] and t["effect"] == taint["effect"])] + [taint]
            notes.append((Write.TAINT, f"{taint['key']}={taint['value']}:{taint['effect']}"))
    annotations: dict[str, str | None] = {}
    unschedulable: bool | None = None
    guarded = isinstance(group, spec.EdgeGroup) and bool(group.fingerprints)
    if not guarded and _has(taints, QUARANTINE_TAINT):
        # Quarantined while it claimed a group it did not match, or two groups matched it: one member now.
        taints = [t for t in taints if t["key"] != QUARANTINE_TAINT["key"]]
        notes.append((Write.RELEASE, f"a member of {group.name} by its match alone"))
    if isinstance(group, spec.EdgeGroup):
        if group.fingerprints and record is None:
            notes.append((Found.IDENTITY, "the identity record could not be read: quarantine left as it is"))
        elif group.fingerprints:
            # The kubelet key fleetops approved for this node, from a record nodes cannot write.
            recorded = record.get(node.name)
            known = recorded in group.fingerprints
            why = (f"its kubelet key {recorded} is not in the allow list of {group.name}" if recorded
                   else f"fleetops approved no kubelet key of this node (a certificate from another approver is no proof of a device in {group.name})")
            quarantined = _has(taints, QUARANTINE_TAINT)
            if not known and not quarantined:
                taints.append(dict(QUARANTINE_TAINT))
                notes.append((Write.QUARANTINE, why))
            elif not known:
                notes.append((Found.QUARANTINED, why))
            elif quarantined:
                taints = [t for t in taints if t["key"] != QUARANTINE_TAINT["key"]]
                notes.append((Write.RELEASE, f"its kubelet key is allowed in {group.name}"))
        if not node.ready:
            offline = (now - node.ready_since).total_seconds() if node.ready_since else None
            if offline is not None and offline > group.offline_grace_seconds and not node.unschedulable:
                unschedulable = True
                annotations[CORDON_ANNOTATION] = "offline"
                notes.append((Write.CORDON, f"NotReady for {int(offline)}s, more than the {group.offline_grace_seconds}s grace of {group.name}"))
            else:
                since = f"{int(offline)}s" if offline is not None else "an unknown time"
                notes.append((Found.OFFLINE, f"NotReady for {since} (grace {group.offline_grace_seconds}s)"))
        elif node.unschedulable and node.annotations.get(CORDON_ANNOTATION) == "offline":
            unschedulable = False
            annotations[CORDON_ANNOTATION] = None
            notes.append((Write.UNCORDON, "Ready again; fleetops cordoned it while offline"))
    patch: Manifest = {}
    if labels or annotations:
        patch["metadata"] = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    if taints != node.taints or unschedulable is not None:
        patch.setdefault("metadata", {})["resourceVersion"] = node.resource_version
        patch["spec"] = {k: v for k, v in (("taints", taints if taints != node.taints else None), ("unschedulable", unschedulable)) if v is not None}
    return patch, notes


def quarantine(cluster: str, node: inventory.NodeInfo, why: str) -> Action:
    """The quarantine taint on a node that is no group's member, or the finding that it has it already."""
    target = f"Node {node.name}"
    if _has(node.taints, QUARANTINE_TAINT):
        return Action(cluster, Found.QUARANTINED, target, why, kind="Node")
    patch = {"metadata": {"resourceVersion": node.resource_version}, "spec": {"taints": [*node.taints, dict(QUARANTINE_TAINT)]}}
    return Action(cluster, Write.QUARANTINE, target, why, kind="Node", key=("v1", "Node", "", node.name), body=patch)


def node_actions(cluster: spec.Cluster, inv: inventory.ClusterInventory, now: dt.datetime,
                 record: dict[str, str] | None = None) -> tuple[list[Action], dict[str, list[inventory.NodeInfo]]]:
    """Per node: its actions (writes carry the node's patch); and the members of each group (for capacity)."""
    out: list[Action] = []
    members: dict[str, list[inventory.NodeInfo]] = {}
    for node in inv.nodes:
        groups = inventory.match_groups(cluster, node)
        impostor = [g.name for g in inventory.claimed_groups(cluster, node) if g not in groups]
        if impostor or len(groups) > 1:
            # Workloads find a group's nodes by its label: a node that claims a group it does not match,
            # or that two groups claim, must run none of them.
            why = (f"carries the label of {', '.join(impostor)} but does not match its match" if impostor
                   else f"matches several groups ({', '.join(g.name for g in groups)})")
            out.append(quarantine(cluster.name, node, why))
            continue
        if not groups:
            out.append(Action(cluster.name, Found.UNMATCHED, f"Node {node.name}", "matches no pool or edge group; left alone", kind="Node"))
            continue
        members.setdefault(groups[0].name, []).append(node)
        patch, notes = node_plan(groups[0], node, now, record)
        for verb, detail in notes:
            # One patch per node carries all its writes; its actions share the outcome.
            write = isinstance(verb, Write)
            out.append(Action(cluster.name, verb, f"Node {node.name}", detail, kind="Node",
                              key=("v1", "Node", "", node.name), body=patch if write else None))
    return out, members


CSR_KIND = ("certificates.k8s.io/v1", "CertificateSigningRequest")


def identity_actions(api: ClusterAPI, cluster: spec.Cluster, opts: Options, result: ClusterResult) -> tuple[list[Action], dict[str, str] | None]:
    """Decide every pending kubelet client certificate request of a guarded cluster; the identity
    record as it stands once they are approved. None for the record when it could not be read."""
    try:
        record_map = call(opts, api.get, "v1", "ConfigMap", opts.namespace, identity.RECORD_CONFIGMAP)
        requests = call(opts, api.list, *CSR_KIND, "")
    except ApiError as exc:
        result.fail(f"{cluster.name}: read kubelet certificate requests: {explain(exc)}", exc)
        return [], None
    record = identity.read_record(record_map)
    before = dict(record)
    actions = []
    for csr in sorted(requests, key=lambda c: c["metadata"]["name"]):
        if not identity.pending(csr):
            continue
        verdict = identity.judge(cluster, identity.read_request(csr), record)
        if verdict is None:  # not an edge device's: Kubernetes' own approver decides it
            continue
        if verdict.approve:
            record[verdict.request.node] = verdict.request.fingerprint
        actions.append(Action(cluster.name, Write.APPROVE if verdict.approve else Write.DENY, f"CertificateSigningRequest {csr['metadata']['name']}",
                              f"node {verdict.request.node}: {verdict.reason}", kind="CertificateSigningRequest",
                              key=(*CSR_KIND, "", csr["metadata"]["name"]), body=identity.approval(csr, verdict)))
    if record != before:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "data": identity.record_data(record),
                "metadata": {"name": identity.RECORD_CONFIGMAP, "namespace": opts.namespace, "labels": {PART_OF: MANAGER},
                             **({"resourceVersion": record_map["metadata"]["resourceVersion"]} if record_map else {})}}
        actions.append(Action(cluster.name, Write.RECORD, f"ConfigMap {opts.namespace}/{identity.RECORD_CONFIGMAP}",
                              "approved " + ", ".join(f"{node}={key}" for node, key in sorted(set(record.items()) - set(before.items()))),
                              kind="ConfigMap", key=("v1", "ConfigMap", opts.namespace, identity.RECORD_CONFIGMAP), body=body))
    return actions, record


def read_nodes(api: ClusterAPI, cluster: spec.Cluster, opts: Options) -> tuple[inventory.ClusterInventory, str | None]:
    try:
        raw = call(opts, api.list, *NODE_KIND, "")
    except ApiError as exc:
        return inventory.ClusterInventory(cluster.name), f"{cluster.name}: list nodes: {exc}"
    return inventory.read_inventory(cluster.name, raw), None


def live_input(env: spec.Environment, inventories: dict[str, inventory.ClusterInventory], results: dict[str, ClusterResult]) -> dict[str, Any]:
    """The live facts the policy sees: nodes, capacity per group and shortfalls against guaranteed quota."""
    return {
        "clusters": {
            name: {
                "nodes": [inventory.LiveNode.of(name, n) for n in inv.nodes],
                "nodes_read": results[name].nodes_read,
                "problems": inv.problems,
                "capacity": [r.to_dict() for r in results[name].capacity],
                "shortfalls": results[name].shortfalls,
            }
            for name, inv in inventories.items()
        },
        "warnings": [s["msg"] for r in results.values() for s in r.shortfalls],
    }
