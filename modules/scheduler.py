"""What the scheduler itself must be told, per cluster: Kueue's own Configuration, and the cluster's
root Cohort (the parent of every tenant's Cohort, modules/tenant.py).

Kueue reads its Configuration from the ConfigMap `kueue-manager-config` (key
`controller_manager_config.yaml`) in `kueue-system` at start; its install creates that ConfigMap with
upstream's defaults, and fleetops owns it from then on, so every field Kueue's own install sets is
set here too. Kueue reads it only when it starts: a change takes effect at its next restart.
"""

from __future__ import annotations

from typing import Any

import yaml

from fleetops import spec
from modules.kube import Part, Target

NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"

# Kueue accounts every resource a pod requests, and a Workload that requests a resource its
# ClusterQueue does not cover is never admitted ("resource cpu unavailable in ClusterQueue"). The
# tenant's LimitRange gives every container cpu and memory requests; fleetops declares device
# quotas only. Covering cpu and memory with quotas in every flavor would invent numbers the
# environment never declared (and charge a pod's cpu to the device pool it lands on); the node's
# own capacity already bounds them at scheduling. So Kueue is told to leave them out.
UNACCOUNTED_PREFIXES = ["cpu", "ephemeral-storage", "hugepages-", "memory"]


def kueue_configuration() -> dict[str, Any]:
    """Upstream's default Configuration (config/components/manager), with what fleetops relies on."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        # Upstream's 50/100 throttles Kueue's one client, which admissions, Job updates, Workload
        # creation and every queue's status writes share: a burst of 1,000 jobs waited 25 s (p50) at
        # 50/100 and 7-8 s at 200/400, for the same API-server CPU (benchmarks/README.md, Kueue).
        "clientConnection": {"qps": 200, "burst": 400},
        # Workers per reconciler, as upstream's install sets them. Without them each runs one
        # (controller-runtime's default): the Job reconciler then creates Workloads slower than a
        # burst of Jobs arrives, and 1,000 jobs waited twice as long (benchmarks/kueue_bench.py).
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
            "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1,
        }},
        # Tenant namespaces refuse a Job without their queue's label (the tenant's admission policy);
        # everything else (system namespaces, the reconciler) is not Kueue's to hold back.
        "manageJobsWithoutQueueName": False,
        # The kinds the tenant's admission policy sends through its queue.
        "integrations": {"frameworks": ["batch/job"]},
        "resources": {"excludeResourcePrefixes": UNACCOUNTED_PREFIXES},
    }


def config_map_manifest(target: Target) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": target.metadata(CONFIG_MAP, NAMESPACE),
        "data": {CONFIG_KEY: yaml.safe_dump(kueue_configuration(), sort_keys=True)},
    }


def cohort_manifest(target: Target, cluster: spec.Cluster, env: spec.Environment) -> dict[str, Any]:
    """The cluster's root Cohort, parent of every tenant's: it holds the capacity no tenant is guaranteed,
    so that a tenant's burst can reach it on an idle cluster (Kueue lends only quota some node of the
    tree holds: without it, burst stopped at what the other tenants' guarantees lend)."""
    groups = [*cluster.pools, *cluster.edge_groups]
    free = spec.unguaranteed(cluster, spec.guarantee_placement(env, cluster).held)
    offered = sorted({r for g in groups for r in spec.group_capacity(g)})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": target.metadata(cluster.name),
        "spec": {"resourceGroups": [
            {"coveredResources": resources,
             # Guarantees beyond capacity are the policies' to refuse; the cohort adds nothing then.
             "flavors": [{"name": f, "resources": [{"name": r, "nominalQuota": max(free.get((f, r), 0), 0)} for r in resources]}
                         for f in flavors]}
            for resources, flavors in spec.bundles(offered, groups)
        ]},
    }


def scheduler(target: Target, env: spec.Environment) -> Part:
    def objects() -> list[dict[str, Any]]:
        # The namespace too: the ConfigMap can be applied before Kueue is installed, and the install
        # then finds its configuration in place.
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": target.metadata(NAMESPACE)},
            config_map_manifest(target),
            cohort_manifest(target, spec.cluster_by_name(env, target.cluster), env),
        ]

    return Part("fleetops:fleet:Scheduler", target.cluster, target, objects,
                outputs={"backend": env.scheduler.backend})
