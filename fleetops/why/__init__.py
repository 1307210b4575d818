"""Why a tenant's job waits, and where a tenant stands, read from the live cluster and said in the
environment file's terms (`fleetops why`, `fleetops standing`, the fleet API's `/v1/tenants/{name}/why`).

A module per job: `jobs` (Kueue's Workloads as the jobs they stand for, validated at the edge), `live`
(one read of a cluster: Workloads, queues, cohorts, flavors, nodes, node leases, the reconciler's
status), `answer` (per job: what blocks it at which line, who holds the capacity, whether it can ever be
admitted as asked, node-level causes and what would let it in) and `standing` (a tenant's guarantee,
use, borrowing, lending and pending work).
"""
