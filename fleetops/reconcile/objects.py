"""The objects fleetops owns in a cluster: one LIST per kind, diffed against Git into creates, updates and prunes."""

from __future__ import annotations

from collections.abc import Iterable

import jsonpatch

from fleetops import diff
from fleetops.cluster import ClusterAPI, field_managers
from fleetops.errors import ApiError, NotFound
from fleetops.kube import CLUSTER_LABEL, ENVIRONMENT_LABEL, MANAGED_BY, MANAGER, PRUNE_ANNOTATION, Key, Manifest, describe, key_of, kind_rank
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import Action, ClusterResult, Found, Write
from fleetops.reconcile.retry import call, explain


def managed_selector(environment: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{ENVIRONMENT_LABEL}={environment}"


# --- objects --------------------------------------------------------------------------------


def kinds_of(manifests: Iterable[Manifest]) -> list[tuple[str, str]]:
    return sorted({(m["apiVersion"], m["kind"]) for m in manifests})


def read_live(api: ClusterAPI, kinds: Iterable[tuple[str, str]], environment: str, opts: Options, result: ClusterResult,
              desired: set[tuple[str, str]], identities: Iterable[Key]) -> tuple[dict[Key, Manifest], set[tuple[str, str]], set[tuple[str, str]]]:
    """Everything fleetops owns in a cluster: one LIST per kind, by label selector, then each of `identities`
    (what Git wants, what fleetops applied) the LIST did not return, by its identity. Returns objects,
    kinds whose LIST (or a look-up) failed, and kinds Git wants that the server does not serve (404: no CRD).

    A kind only remembered from earlier passes whose type the server no longer serves holds
    nothing: it is dropped, not an error.
    """
    live: dict[Key, Manifest] = {}
    failed: set[tuple[str, str]] = set()
    unserved: set[tuple[str, str]] = set()
    listed: set[tuple[str, str]] = set()
    selector = managed_selector(environment)
    for api_version, kind in kinds:
        try:
            for obj in call(opts, api.list, api_version, kind, selector):
                live[key_of(obj)] = obj
            listed.add((api_version, kind))
        except NotFound:
            if (api_version, kind) in desired:
                unserved.add((api_version, kind))
        except ApiError as exc:
            failed.add((api_version, kind))
            result.fail(f"{result.cluster}: list {kind}: {explain(exc)}", exc)
    # The selector's labels are the object's, anyone may edit them: an object whose label was edited by hand
    # is still the one Git wants (drift in that label, repaired by an apply, never a create) or the one
    # fleetops applied (still not pruned without its marks, still in the inventory). Only what the LIST
    # missed is looked up: a steady pass makes no such call.
    for key in sorted(k for k in identities if k not in live and (k[0], k[1]) in listed):
        try:
            found = call(opts, api.find, *key)
        except ApiError as exc:
            failed.add((key[0], key[1]))  # unknown, not absent: applied anyway, kept in the inventory
            result.fail(f"{result.cluster}: read {describe(key)}: {explain(exc)}", exc)
            continue
        if found is not None:
            live[key] = found
    return live, failed, unserved


# What serves each API group fleetops renders beyond Kubernetes' own: a bare cluster lacks them all.
PROVIDERS = {
    "kueue.x-k8s.io": "Kueue",
    "apps.kubeedge.io": "KubeEdge",
    "apps.openyurt.io": "OpenYurt (yurt-manager)",
    "monitoring.coreos.com": "prometheus-operator",
}


def not_served(cluster: str, desired: list[Manifest], unserved: set[tuple[str, str]]) -> list[str]:
    """One line per API version Git needs and the server lacks, naming what to install, instead of one error per object."""
    lines = []
    for api_version in sorted({v for v, _ in unserved}):
        kinds = sorted(k for v, k in unserved if v == api_version)
        count = sum(1 for m in desired if m["apiVersion"] == api_version and m["kind"] in kinds)
        group = api_version.partition("/")[0]
        provider = f"{PROVIDERS[group]} (its CRDs and controller)" if group in PROVIDERS else f"the CRDs of {group}"
        lines.append(f"{cluster}: {api_version} not served: install {provider} before fleetops applies "
                     f"{', '.join(kinds)} ({count} object(s) not applied)")
    return lines


NAMESPACE_NOT_PRUNED = "not in Git; a Namespace is never pruned (deleting it deletes everything in it): delete it by hand once empty"


def changed_by(live: Manifest, changes: list[diff.FieldChange]) -> dict[str, str]:
    """Per drifted field, the field managers other than fleetops that own it live (a removed field has none)."""
    out = {}
    for change in changes:
        managers = [m for m in field_managers(live, jsonpatch.JsonPointer(change.path).parts) if m != MANAGER]
        if change.op != "add" and managers:
            out[change.path] = ", ".join(sorted(set(managers)))
    return out


NOT_APPLIED = "carries fleetops' labels but fleetops never applied it (not in its inventory): never pruned"
UNMARKED = ("not in Git; fleetops applied it but its labels no longer mark it fleetops' (edited by hand?): never pruned: "
            "delete it by hand, or restore the labels and --prune deletes it")


def marked(manifest: Manifest, environment: str) -> bool:
    """Whether an object carries fleetops' ownership labels for this environment (what the LIST selects)."""
    labels = manifest.get("metadata", {}).get("labels") or {}
    return labels.get(MANAGED_BY) == MANAGER and labels.get(ENVIRONMENT_LABEL) == environment


def object_actions(cluster: str, environment: str, desired: list[Manifest], live: dict[Key, Manifest], failed: set[tuple[str, str]],
                   opts: Options, applied: set[Key] | None) -> list[Action]:
    """Creates and updates in apply order, then prunes (workloads before namespaces).

    Only an object of the last inventory (`applied`; None when it could not be read), in a namespace
    fleetops manages, that still carries fleetops' labels, is pruned: its labels alone prove nothing,
    and an inventory alone does not overrule a person who took the labels away.
    """
    actions: list[Action] = []
    wanted: set[Key] = set()
    for manifest in sorted(desired, key=kind_rank):
        key = key_of(manifest)
        wanted.add(key)
        current = live.get(key)
        if current is None:
            # A kind whose LIST failed is unknown, not absent: apply it anyway (apply is idempotent).
            verb = Write.APPLY if (key[0], key[1]) in failed else Write.CREATE
            actions.append(Action(cluster, verb, describe(key), None, kind=key[1], key=key, body=manifest))
        elif changes := diff.drift(manifest, current):
            actions.append(Action(cluster, Write.UPDATE, describe(key), changes, kind=key[1], key=key, body=manifest,
                                  changed_by=changed_by(current, changes)))
    known = applied or set()
    # Namespaces fleetops creates, or created, and those Git puts objects in (kube-system for a plugin).
    managed = {k[3] for k in wanted | known if k[1] == "Namespace"} | {k[2] for k in wanted if k[2]}
    extra = sorted((k for k in live if k not in wanted), key=lambda k: -kind_rank({"kind": k[1]}))
    for key in extra:
        meta = live[key].get("metadata", {})
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        if not marked(live[key], environment):
            if key in known:  # found by its identity: fleetops applied it, then its labels were edited
                actions.append(Action(cluster, Found.ORPHAN, describe(key), UNMARKED, kind=key[1]))
            continue  # never touch what fleetops does not own, whatever the server returned
        if labels.get(CLUSTER_LABEL, cluster) != cluster:
            actions.append(Action(cluster, Found.FOREIGN, describe(key), f"labelled for cluster {labels[CLUSTER_LABEL]}", kind=key[1]))
        elif notes.get(PRUNE_ANNOTATION) == "disabled":
            actions.append(Action(cluster, Found.PROTECTED, describe(key), f"{PRUNE_ANNOTATION}: disabled", kind=key[1]))
        elif key[1] == "Namespace":
            # Deleting a namespace deletes everything in it, objects fleetops does not own and protected
            # ones included; its managed contents are pruned one by one, the namespace is left to a person.
            actions.append(Action(cluster, Found.ORPHAN, describe(key), NAMESPACE_NOT_PRUNED, kind=key[1]))
        elif applied is None:
            actions.append(Action(cluster, Found.ORPHAN, describe(key), "not in Git; the inventory could not be read: not pruned this pass", kind=key[1]))
        elif key not in applied:
            actions.append(Action(cluster, Found.UNOWNED, describe(key), NOT_APPLIED, kind=key[1]))
        elif key[2] and key[2] not in managed:
            actions.append(Action(cluster, Found.UNOWNED, describe(key), f"in namespace {key[2]}, which fleetops does not manage: never pruned", kind=key[1]))
        elif opts.prune:
            actions.append(Action(cluster, Write.PRUNE, describe(key), None, kind=key[1], key=key))
        else:
            actions.append(Action(cluster, Found.ORPHAN, describe(key), "not in Git; --prune deletes it", kind=key[1]))
    return actions
