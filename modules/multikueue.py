"""Spill-over with Kueue's MultiKueue: a tenant's jobs submitted on a manager cluster run on its workers.

A tenant that declares `spill_over: {manager, workers}` submits its jobs to its usual LocalQueue on
the manager. There the queue's ClusterQueue carries the MultiKueue AdmissionCheck: Kueue reserves
quota on the manager, copies the Workload to every worker of the tenant's MultiKueueConfig, and the
first worker whose own Kueue admits it (in the LocalQueue of the same name, the tenant's queues as
rendered on each of its clusters, modules/tenant.py) gets the job; the others drop their copy. The
manager runs none of it: Kueue marks the manager's Job as managed by MultiKueue.

The manager's quota is derived, never declared: per flavor, what the tenant may hold on the worker
that has the pool (its guarantee there plus what it may borrow), summed over the workers. So the
manager stops dispatching only when the tenant's burst is taken on every worker.

Kueue on the manager reaches each worker through a kubeconfig in a Secret of its own namespace
(key `kubeconfig`, named here `multikueue-<worker>`). Those Secrets hold credentials: fleetops names
them and never renders them; the operator creates them (README.md, "Spill-over").
"""

from __future__ import annotations

from typing import Any

from fleetops import kube, spec
from fleetops.spec import NON_PREEMPTING, bundles, non_preempting_classes, queue_names
from modules.kube import Part, Target
from modules.node_pool import flavor_manifest
from modules.scheduler import NAMESPACE as KUEUE_NAMESPACE
from modules.tenant import (NEVER_PREEMPTS, admission_manifests, cluster_queue_manifest, local_queue_manifest, namespace_manifest,
                            network_manifests, resource_groups)

CONTROLLER = "kueue.x-k8s.io/multikueue"
GROUP = "kueue.x-k8s.io"
VERSION = f"{GROUP}/v1beta2"


def secret_name(worker: str) -> str:
    """The Secret in Kueue's namespace on the manager holding the worker's kubeconfig: the operator's."""
    return f"multikueue-{worker}"


def check_name(tenant: spec.Tenant) -> str:
    return f"multikueue-{tenant.name}"


Managed = tuple[spec.Tenant, list[spec.Cluster]]  # a tenant and its workers


def managed(env: spec.Environment, cluster: str) -> list[Managed]:
    """The tenants whose spill-over `cluster` manages, each with its workers."""
    return [(t, [spec.cluster_by_name(env, name) for name in spill.workers])
            for t in env.tenants if (spill := t.spill_over) is not None and spill.manager == cluster]


def summed_quota(env: spec.Environment, tenant: spec.Tenant, workers: list[spec.Cluster]) -> list[dict[str, Any]]:
    """The manager's resourceGroups: per flavor and resource, the most the tenant may hold there on each
    worker (its nominalQuota plus its borrowing limit, as modules/tenant.py renders them), summed."""
    lend = env.scheduler.lend_fraction
    held: dict[tuple[str, str], int] = {}
    every: list[spec.Group] = []
    for cluster in workers:
        groups = spec.eligible_groups(tenant, [cluster])
        every += groups
        placement = spec.guarantee_placement(env, cluster)
        for group in resource_groups(tenant, groups, placement, lend, lambda n, b, lent: {"nominalQuota": n + b}):
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    held[(flavor["name"], r["name"])] = held.get((flavor["name"], r["name"]), 0) + r["nominalQuota"]
    return [
        {"coveredResources": resources,
         "flavors": [{"name": f, "resources": [{"name": r, "nominalQuota": held.get((f, r), 0)} for r in resources]} for f in flavors]}
        for resources, flavors in bundles(sorted(tenant.quota), every)
    ]


def tenant_manifests(target: Target, tenant: spec.Tenant, workers: list[spec.Cluster], env: spec.Environment) -> list[dict[str, Any]]:
    """The tenant on its manager: its namespace, network policies and admission policy (jobs go through
    its queue, as on every cluster of its; no pod of its runs here, so no flow reaches it), the AdmissionCheck and MultiKueueConfig, and its queues dispatching."""
    labels = {kube.TENANT_LABEL: tenant.name}
    check = check_name(tenant)
    cohort = f"{target.cluster}.{tenant.name}"

    def cluster_queue(name: str, resource_groups: list[dict[str, Any]]) -> dict[str, Any]:
        return cluster_queue_manifest(target, tenant, name, cohort, {
            "resourceGroups": resource_groups,
            "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
            # The workers preempt, each by its own queues' policies and the capacity it has; the
            # manager holds no capacity, and evicting here would only withdraw a job a worker runs.
            "preemption": NEVER_PREEMPTS,
        })

    summed = summed_quota(env, tenant, workers)
    preempting, never = queue_names(tenant)
    out = [
        namespace_manifest(target, tenant),
        {"apiVersion": VERSION, "kind": "AdmissionCheck", "metadata": target.metadata(check, labels=labels),
         "spec": {"controllerName": CONTROLLER, "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": tenant.name}}},
        {"apiVersion": VERSION, "kind": "MultiKueueConfig", "metadata": target.metadata(tenant.name, labels=labels),
         "spec": {"clusters": [c.name for c in workers]}},
        # The tenant's two queues share its summed quota, as on a worker: held by the first, borrowed by the second.
        {"apiVersion": VERSION, "kind": "Cohort", "metadata": target.metadata(cohort, labels=labels), "spec": {}},
        cluster_queue(tenant.name, summed),
        local_queue_manifest(target, tenant, preempting, tenant.name),
    ]
    if non_preempting_classes(tenant, env):
        name = f"{tenant.name}-{NON_PREEMPTING}"
        zero = [{**g, "flavors": [{**f, "resources": [{**r, "nominalQuota": 0} for r in f["resources"]]} for f in g["flavors"]]} for g in summed]
        out += [cluster_queue(name, zero), local_queue_manifest(target, tenant, never, name)]
    return out + network_manifests(target, tenant, env) + admission_manifests(target, tenant, env)


def multikueue(target: Target, env: spec.Environment) -> Part | None:
    """What the manager `target.cluster` holds for the tenants it dispatches for; None where it is no manager."""
    tenants = managed(env, target.cluster)
    if not tenants:
        return None

    names = list(dict.fromkeys(c.name for _, workers in tenants for c in workers))

    def objects() -> list[dict[str, Any]]:
        # The workers' pools as flavors, so that the manager assigns by the same node labels and taints.
        flavors = {g.name: g for tenant, workers in tenants for g in spec.eligible_groups(tenant, workers)}
        out = [flavor_manifest(target, g) for g in flavors.values()]
        out += [{"apiVersion": VERSION, "kind": "MultiKueueCluster", "metadata": target.metadata(name),
                 "spec": {"clusterSource": {"kubeConfig": {"location": secret_name(name), "locationType": "Secret"}}}}
                for name in names]
        for tenant, workers in tenants:
            out += tenant_manifests(target, tenant, workers, env)
        return out

    return Part("fleetops:fleet:MultiKueue", target.cluster, target, objects,
                outputs={"tenants": [t.name for t, _ in tenants],
                         "kubeconfig_secrets": [f"{KUEUE_NAMESPACE}/{secret_name(name)}" for name in names]})
