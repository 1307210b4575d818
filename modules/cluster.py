"""A Kubernetes cluster of the fleet: its own pulumi_kubernetes Provider from a kubeconfig context."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from fleetops import spec
from modules.kube import Target


class Cluster(pulumi.ComponentResource):
    def __init__(self, cluster: spec.Cluster, environment: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fleetops:fleet:Cluster", cluster.name, None, opts)
        provider = k8s.Provider(
            cluster.name,
            context=cluster.context,
            kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.target = Target(cluster=cluster.name, environment=environment, provider=provider)
        self.register_outputs({"context": cluster.context, "role": cluster.role})
