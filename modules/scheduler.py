"""What the scheduler itself must be told, per cluster: Kueue's own Configuration.

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
        "clientConnection": {"qps": 50, "burst": 100},
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


def scheduler(target: Target, env: spec.Environment) -> Part:
    def objects() -> list[dict[str, Any]]:
        if env.scheduler.backend != "kueue":
            return []
        # The namespace too: the ConfigMap can be applied before Kueue is installed, and the install
        # then finds its configuration in place.
        return [{"apiVersion": "v1", "kind": "Namespace", "metadata": target.metadata(NAMESPACE)}, config_map_manifest(target)]

    return Part("fleetops:fleet:Scheduler", target.cluster, target, objects,
                outputs={"backend": env.scheduler.backend})
