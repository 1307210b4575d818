"""Keep the live fleet equal to Git: one pass, and the loop around it.

A pass: fetch the revision -> validate and render -> read live nodes -> gate (policy, with the live
inventory in its input) -> per cluster, in parallel: one LIST per kind by the managed-by selector,
diff on the fields fleetops sets, server-side apply in kind order, prune (only when asked, and only
what its inventory of applied objects holds), node labels/taints/quarantine/cordon, inventory and
status ConfigMaps. Anything that fails closed stops before the first write: no policy engine, an
invalid revision, a denied one. The last applied revision stays.

The loop adds metrics (errors and reachability per cluster among them), /healthz, /readyz (the last
pass worked, or why not), JSON logs and leader election through a Lease per cluster, so that several
replicas can run and only the leader of a cluster writes to it; with shards, the replicas split the clusters.

A module per job: `options` (what a pass may do), `gate`, `result` (actions: writes and findings, their outcomes, results, statuses),
`retry` (backoff and the unreachable-server guard), `objects` (LIST, diff, prune), `nodes` (labels,
taints, quarantine, cordon, certificate requests), `status` (status and inventory ConfigMaps),
`sync` (one pass over every cluster), `source` (Git), `lease` (leader election), `shards` (replicas sharing the
clusters: slot Leases and the assignment), `service`
(metrics, health, logs) and `loop` (the ReconcileLoop). This module names what the CLI and tests use.
"""

from fleetops.reconcile.gate import GateResult, default_gate
from fleetops.reconcile.lease import LeaseElector
from fleetops.reconcile.loop import LOG_ITEMS, ReconcileLoop
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import Found, Outcome, PassResult, PassStatus, Write
from fleetops.reconcile.retry import call
from fleetops.reconcile.service import JsonFormatter, Metrics, json_logging, serve_http
from fleetops.reconcile.source import GitSource, redact
from fleetops.reconcile.shards import Shards, assign
from fleetops.reconcile.status import INVENTORY_CONFIGMAP, INVENTORY_KEY, applied_keys, inventory_content, record_deploy
from fleetops.reconcile.sync import run_pass

__all__ = [
    "GateResult",
    "GitSource",
    "INVENTORY_CONFIGMAP",
    "INVENTORY_KEY",
    "JsonFormatter",
    "LOG_ITEMS",
    "LeaseElector",
    "Metrics",
    "Options",
    "PassResult",
    "PassStatus",
    "Found",
    "Outcome",
    "Write",
    "ReconcileLoop",
    "Shards",
    "applied_keys",
    "assign",
    "call",
    "default_gate",
    "inventory_content",
    "record_deploy",
    "json_logging",
    "redact",
    "run_pass",
    "serve_http",
]
