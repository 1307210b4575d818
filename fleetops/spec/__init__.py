"""The environment model: what `environments/<env>.yaml` may say, and the facts derived from it.

A module per job, each reading only those named before it (.importlinter holds it): `fields` (the
pydantic models, their field types and name patterns, LIMITS), `positions` (the YAML walk that keeps
every node's line and column), `devices` (physical devices and schedulable units, per group and
cluster), `nodes` (what a group's nodes carry, which live node is whose), `cost` (prices, and the base revision's reference prices a change is judged at), `placement`
(the groups open to a tenant, Kueue's resource groups and limits, where each guarantee is held),
`intent` (who may talk to whom on each cluster, on which ports: the network's one model), `checks` (validate's refusals across fields) and `document` (reading and validating a file, problems
at file:line:col). This module names them all, so that `spec.Environment`, `spec.load_environment`,
... read the same wherever they are defined.
"""

from fleetops.errors import SpecError
from fleetops.spec.fields import (
    DEFAULT_TOLERATION_SECONDS, DNS_LABEL_RULE, G, LIMITS, MAX_COUNT, Api, Billing, Budget, CachedModel, Cidr, Cluster,
    Count, Currency, Device, Devices, Disconnect, EdgeGroup, Endpoint, Environment, Fingerprint, Fraction, Grafana,
    Group, GroupNames, Image, LabelKey, LabelValue, Labels, Limits, Mig, MigProfile, Model, Monitoring, Name, Network,
    NodeGlob, NodeMatch, OfflineWork, PluginKind, Pool, Positive, PriorityClass, Quota, Reconciler, Replica, Replicas,
    ResourceName, Scheduler, Server, Service, Sharing, SpillOver, Spot, Taint, Targets, Tenant, TenantNetwork, TopUp, Url,
    Workload, group_names, is_dns_label, is_mig_capable, named_groups, plugin_kind,
)
from fleetops.spec.positions import (
    YAML_LOADER, Loc, Positions, format_loc, parse_yaml, yaml_errors,
)
from fleetops.spec.devices import (
    NO_CAPACITY, Capacity, ClusterCapacity, capacity, capacity_rows, cluster_by_name, group_capacity, is_spot, mig_resource, physical, physical_devices,
    physical_shares, quota_sums, service_pools,
)
from fleetops.spec.nodes import (
    RESERVED_LABELS, SPOT_TAINT, matches_node, node_labels, taints,
)
from fleetops.spec.cost import (
    HOURS_PER_MONTH, Basis, Reference, below_reference, cost_at_reference, device_hour_price, group_monthly_cost,
    judged_hour_price, model_price_change, monthly_cost, price_change_cost, replica_monthly_cost, repriced_monthly_cost, unit_hour_price,
)
from fleetops.spec.placement import (
    KUEUE, NON_PREEMPTING, QUEUE_NAME_MAX, KueueLimits, Placement, bundles, eligible_groups, guarantee_placement,
    kueue_limit_problem, non_preempting_classes, offline_queue_name, open_groups, preemptible_classes, queue_names,
    lent, restricting_taints, tenant_classes, unguaranteed,
)
from fleetops.spec.intent import (
    API, RECONCILER, RECONCILER_METRICS_PORT, End, Flow, Kind, Port, Protocol, Reach, Reason, reach,
)
from fleetops.spec.checks import (
    SYSTEM_NAMESPACES, cross_checks, over_limits,
)
from fleetops.spec.document import (
    ENVIRONMENTS, MAX_PRUNES, Document, environment_path, load_environment, no_environment, parse_environment, read_bounded, read_output,
    read_environment,
)

__all__ = [
    "API", "RECONCILER", "RECONCILER_METRICS_PORT", "End", "Flow", "Kind", "Port", "Protocol", "Reach", "Reason", "reach",
    "Api", "Basis", "Billing", "Budget", "CachedModel", "Cidr", "Cluster", "Count", "Currency", "DEFAULT_TOLERATION_SECONDS",
    "DNS_LABEL_RULE", "Device", "Devices", "Disconnect", "Document", "ENVIRONMENTS", "EdgeGroup", "Endpoint",
    "Environment", "Fingerprint", "Fraction", "G", "Grafana", "Group", "GroupNames", "HOURS_PER_MONTH", "Image",
    "KUEUE", "KueueLimits", "LIMITS", "LabelKey", "LabelValue", "Labels", "Limits", "Loc", "MAX_COUNT", "MAX_PRUNES",
    "Mig", "MigProfile", "Model", "Monitoring", "NON_PREEMPTING", "Name", "Network", "NodeGlob", "NodeMatch",
    "OfflineWork", "Placement", "PluginKind", "Pool", "Positions", "Positive", "PriorityClass", "QUEUE_NAME_MAX", "Quota",
    "RESERVED_LABELS", "Reconciler", "Reference", "Replica", "Replicas", "ResourceName", "SPOT_TAINT", "SYSTEM_NAMESPACES",
    "Scheduler", "Server", "Service", "Sharing", "SpecError", "SpillOver", "Spot", "Taint", "Targets", "Tenant", "TenantNetwork",
    "TopUp", "Url", "Workload", "YAML_LOADER", "NO_CAPACITY", "Capacity", "ClusterCapacity", "below_reference", "bundles", "capacity", "capacity_rows", "cluster_by_name",
    "cost_at_reference", "cross_checks", "device_hour_price", "eligible_groups", "environment_path", "format_loc", "group_capacity",
    "group_monthly_cost", "group_names", "guarantee_placement", "is_dns_label", "is_mig_capable", "is_spot",
    "judged_hour_price", "kueue_limit_problem", "lent", "load_environment", "matches_node", "mig_resource", "model_price_change", "monthly_cost", "named_groups",
    "no_environment", "node_labels", "non_preempting_classes", "offline_queue_name", "open_groups", "over_limits", "parse_environment", "parse_yaml",
    "physical", "physical_devices", "physical_shares", "plugin_kind", "preemptible_classes", "price_change_cost", "queue_names", "quota_sums",
    "read_bounded", "read_environment", "read_output", "replica_monthly_cost", "repriced_monthly_cost", "restricting_taints", "service_pools", "taints", "tenant_classes",
    "unguaranteed", "unit_hour_price", "yaml_errors",
]
