"""The whole declared fleet: every cluster with its pools, edge groups, tenants, priorities and monitoring."""

from __future__ import annotations

import pulumi

from fleetops import spec
from modules.cluster import Cluster
from modules.device_plugin import DevicePlugin
from modules.edge_group import EdgeNodeGroup
from modules.monitoring import Monitoring
from modules.node_pool import NodePool
from modules.priorities import Priorities
from modules.reconciler import Reconciler
from modules.tenant import Tenant


class Fleet(pulumi.ComponentResource):
    def __init__(self, env: spec.Environment, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fleetops:fleet:Fleet", env.environment, None, opts)
        for cluster in env.clusters:
            node = Cluster(cluster, env.environment, opts=pulumi.ResourceOptions(parent=self))
            child = pulumi.ResourceOptions(parent=node)
            target = node.target
            Priorities(target, env, opts=child)
            for pool in cluster.pools:
                NodePool(target, pool, env.scheduler, opts=child)
                DevicePlugin(target, pool, opts=child)
            for group in cluster.edge_groups:
                EdgeNodeGroup(target, cluster, group, env.scheduler, opts=child)
            for tenant in env.tenants:
                if cluster.name in tenant.clusters:
                    Tenant(target, tenant, env, opts=child)
            Monitoring(target, cluster, env, opts=child)
            Reconciler(target, env, opts=child)  # last: its RBAC covers the kinds declared above
        self.register_outputs({"clusters": [c.name for c in env.clusters]})
