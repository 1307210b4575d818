"""Every Prometheus series fleetops reads or writes, named once, with its labels.

The renderers (modules/metering.py, monitoring.py, dashboards.py, autoscaling.py), the readers (plan's usage,
the statements, `standing`'s history) and the reconciler's own metrics take their names from here, so a
renamed series is one edit and a reader cannot ask for a name no rule records. A name's labels are said
beside it; the recording rules' labels are the contract their readers group and filter by.
"""

from __future__ import annotations

UP = "up"  # Prometheus's own, per scrape target: {job, instance} and what the scrape adds (cluster)

# --- fleetops's recording rules (modules/metering.py renders them) --------------------------------------
# The physical devices a tenant's running pods hold on a pool: {cluster, pool, tenant, resource}.
DEVICES = "fleetops:tenant_devices:physical"
# DEVICES x the price per device-hour: {cluster, pool, tenant, currency}.
SPEND = "fleetops:tenant_spend:per_hour"
# The physical devices a pool's (or edge group's) nodes offer, allocatable over the sharing factor: {cluster, pool, resource}.
POOL_DEVICES = "fleetops:pool_devices:physical"
# POOL_DEVICES less what tenants' running pods hold (DEVICES), never below 0: the capacity no tenant used, held by
# nothing or by pods of no tenant (kube-system's): {cluster, pool}.
IDLE_DEVICES = "fleetops:pool_idle_devices:physical"
# IDLE_DEVICES x the price per device-hour: what the idle capacity costs: {cluster, pool, currency}.
IDLE_SPEND = "fleetops:pool_idle_spend:per_hour"
# SPEND labelled with the month of the evaluation: {cluster, pool, tenant, currency, month}.
SPEND_BY_MONTH = "fleetops:tenant_spend_by_month:per_hour"
# Spend since the 1st, 00:00 UTC: {cluster, pool, tenant, currency}.
MONTH_TO_DATE = "fleetops:tenant_spend:month_to_date"
# A prepaid tenant's spend per hour from its first top-up on: {tenant, currency}.
PREPAID_SPEND = "fleetops:tenant_spend_prepaid:per_hour"
# A prepaid tenant's top-ups less its spend: {tenant, currency}.
BALANCE = "fleetops:tenant_balance:remaining"

# --- kube-state-metrics (upstream names) ----------------------------------------------------------------
POD_REQUESTS = "kube_pod_container_resource_requests"  # {namespace, pod, node, resource}
POD_PHASE = "kube_pod_status_phase"  # {namespace, pod, phase}: 1 for the pod's phase, 0 for the others
NODE_ALLOCATABLE = "kube_node_status_allocatable"  # {node, resource, unit}
NODE_LABELS = "kube_node_labels"  # {node, label_<name>} for the allowlisted node labels
NAMESPACE_LABELS = "kube_namespace_labels"  # {namespace, label_<name>} for the allowlisted namespace labels
NODE_CONDITION = "kube_node_status_condition"  # {node, condition, status}
RESOURCE_QUOTA = "kube_resourcequota"  # {namespace, resource, type: hard|used}

# --- Kueue (pkg/metrics) --------------------------------------------------------------------------------
KUEUE_PENDING = "kueue_pending_workloads"  # {cluster_queue, status}, a gauge
KUEUE_ADMISSION_WAIT = "kueue_admission_wait_time_seconds"  # {cluster_queue}, a histogram: creation to admission

# --- device exporters -----------------------------------------------------------------------------------
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # dcgm-exporter default-counters.csv, 0-100 per GPU
GPU_MEMORY_USED = "DCGM_FI_DEV_FB_USED"  # dcgm-exporter, MiB per GPU
# MindCluster npu-exporter collector ("the ai core utilization"), labelled id, model_name, namespace, pod_name.
NPU_UTIL = "npu_chip_info_utilization"

# --- inference servers (the queues an autoscaler reads) -------------------------------------------------
VLLM_WAITING = "vllm:num_requests_waiting"
TRITON_PENDING = "nv_inference_pending_request_count"

# --- the reconciler's own (fleetops/reconcile/service.py serves them) ------------------------------------
RECONCILE_DURATION = "fleetops_reconcile_duration_seconds"
DRIFT = "fleetops_drift_objects"  # {cluster, kind}
APPLY_ERRORS = "fleetops_apply_errors"  # {cluster, kind}
POLICY_DENIALS = "fleetops_policy_denials"
CAPACITY_DEVICES = "fleetops_capacity_devices"  # {cluster, resource, state}
LAST_SUCCESS = "fleetops_last_success_timestamp_seconds"
RECONCILE_ERRORS = "fleetops_reconcile_errors"  # {cluster}
CLUSTER_UP = "fleetops_cluster_up"  # {cluster}
CAPACITY_READ = "fleetops_capacity_read_timestamp_seconds"  # {cluster}
REVISION = "fleetops_revision_info"  # {cluster, revision}: 1 for the revision the cluster's fleetops-status records as applied
# Per shard, when replicas share the fleet (fleetops/reconcile/shards.py): each replica reports its own shard.
SHARD_CLUSTERS = "fleetops_shard_clusters"  # {shard}
SHARD_OBJECTS = "fleetops_shard_objects"  # {shard}: objects Git wants on its clusters
SHARD_PASS_SECONDS = "fleetops_shard_pass_seconds"  # {shard}: its clusters' pass seconds, smoothed, summed (the load it is balanced on)
SHARD_LAG = "fleetops_shard_lag_seconds"  # {shard, cluster}: since the cluster was last reconciled by the shard (or assigned to it)
