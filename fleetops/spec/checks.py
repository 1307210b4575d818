"""What validate refuses beyond each field's own type: the LIMITS no one field expresses, and the
rules that span fields (unique names, references that resolve, sharing valid for the device, what
Kueue and the API server would refuse at apply). Each is (place, message): the caller words the place."""

from collections.abc import Callable, Iterable, Iterator

from fleetops import mig
from fleetops.spec.devices import group_capacity, is_spot, physical_devices
from fleetops.spec.fields import (LIMITS, MAX_COUNT, Billing, Cluster, Device, EdgeGroup, Environment, Pool, Quota, Server, Sharing, SpillOver, Tenant,
                                  group_names, is_mig_capable, plugin_kind)
from fleetops.spec.nodes import RESERVED_LABELS, SPOT_TAINT
from fleetops.spec.placement import (KUEUE, NON_PREEMPTING, QUEUE_NAME_MAX, bundles, eligible_groups, guarantee_placement,
                                     kueue_limit_problem, non_preempting_classes, offline_queue_name, open_groups, preemptible_classes,
                                     queue_names, tenant_classes)
from fleetops.spec.positions import Loc, format_loc

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _counted(items: Iterable[tuple[Loc, int]], what: str) -> Iterator[tuple[Loc, str]]:
    """The item whose count takes the running total of `what` past MAX_COUNT, at its field."""
    total = 0
    for loc, count in items:
        total += count
        if total > MAX_COUNT:
            yield loc, (f"{what} add up to {total:,} with this one, more than {MAX_COUNT:,} (2^53 - 1), the most a count may be "
                        "and stay exact in JSON, the policies and the API server's quantities: lower it")
            return


def over_counts(env: Environment) -> Iterator[tuple[Loc, str]]:
    """The counts fleetops derives by multiplying and adding declared ones (devices are nodes x per_node,
    units are devices x time-slicing replicas or MIG instances, summed per cluster; quotas summed over
    tenants; a service's devices at max), each bounded as a whole: every field within its own bound,
    their product or sum could still pass 64 bits and crash every command that writes it as JSON. The
    totals bound every partial sum and product the engine or a policy takes of them."""
    groups = [(("clusters", ci, kind, gi), g) for ci, c in enumerate(env.clusters)
              for kind, members in (("pools", c.pools), ("edge_groups", c.edge_groups)) for gi, g in enumerate(members)]
    devices = list(_counted(((loc + ("nodes",), physical_devices(g)) for loc, g in groups), "the environment's devices (nodes x per_node)"))
    yield from devices
    if not devices:  # units are devices shared: past the bound with them, as said
        yield from _counted(((loc + ("sharing",) if isinstance(g, Pool) else loc + ("nodes",), sum(group_capacity(g).values())) for loc, g in groups),
                            "the environment's schedulable units (devices x time-slicing replicas or MIG instances)")
    yield from _counted(((("tenants", ti, "quota", resource), max(q.guaranteed, q.burst) * len(t.clusters))
                         for ti, t in enumerate(env.tenants) for resource, q in t.quota.items()), "the tenants' quotas, counted in each of their clusters")
    yield from _counted(((("services", si, "replicas", "max"), s.replicas.max * s.devices.count) for si, s in enumerate(env.services)),
                        "the services' devices at their replicas' max")


def over_limits(env: Environment) -> Iterator[tuple[Loc, str]]:
    """The LIMITS that no one field's bound expresses (clusters and tenants are bounded where declared)."""
    groups = sum(len(c.pools) + len(c.edge_groups) for c in env.clusters)
    if groups > LIMITS.groups:
        yield ("clusters",), f"{groups:,} pools and edge groups, more than the {LIMITS.groups:,} one environment may hold (fleetops.spec.LIMITS)"
        return  # the count below grows with the groups: this line says enough
    yield from over_counts(env)
    clusters = {c.name: c for c in reversed(env.clusters)}  # a name declared twice resolves to the first
    placements = 0
    for tenant in env.tenants:
        placements += sum(open_groups(tenant, clusters[name]) for name in set(tenant.clusters) if name in clusters)
        if placements > LIMITS.placements:
            yield ("tenants",), (f"the tenants may use more than {LIMITS.placements:,} pools and edge groups, counted in each "
                                 f"of their clusters (fleetops.spec.LIMITS): name fewer in their pools")
            return


def _duplicates(items: Iterable[tuple[Loc, str]], what: str, where: Callable[[Loc], str], named: bool = True) -> Iterator[tuple[Loc, str]]:
    """Repeated names: `named` items are objects with a `name` field, else the names themselves."""
    seen: dict[str, Loc] = {}
    for loc, name in items:
        if name in seen:
            yield (loc + ("name",) if named else loc), f"duplicate {what} name {name!r} (first at {where(seen[name])})"
        else:
            seen[name] = loc


def _sharing_checks(loc: Loc, device: Device, sharing: Sharing) -> Iterator[tuple[Loc, str]]:
    sloc = loc + ("sharing",)
    if sharing.mode == "time-slicing":
        if sharing.replicas is None:
            yield sloc + ("replicas",), "time-slicing needs replicas (>= 2)"
        elif sharing.replicas < 2:
            yield sloc + ("replicas",), f"time-slicing replicas must be >= 2, got {sharing.replicas}"
    elif sharing.replicas is not None:
        yield sloc + ("replicas",), f"replicas only applies to time-slicing, not {sharing.mode}"
    if sharing.mode == "mig":
        if plugin_kind(device.resource) != "nvidia" or not is_mig_capable(device.model):
            yield sloc + ("mode",), f"MIG is not available on {device.model} ({device.resource})"
        if sharing.mig is None:
            yield sloc + ("mig",), "mode mig needs a mig section with profiles"
        elif sharing.mig.strategy == "single" and len(sharing.mig.profiles) != 1:
            yield sloc + ("mig", "profiles"), "MIG strategy single takes exactly one profile"
        elif is_mig_capable(device.model) and (problem := mig.layout_problem(device.model, dict(sharing.mig.profiles))):
            layout = ", ".join(f"{name}: {count}" for name, count in sorted(sharing.mig.profiles.items()))
            yield sloc + ("mig", "profiles"), f"{{{layout}}} is not a layout of one GPU: {problem}"
    elif sharing.mig is not None:
        yield sloc + ("mig",), f"a mig section only applies to mode mig, not {sharing.mode}"
    if sharing.mode != "exclusive" and plugin_kind(device.resource) != "nvidia":
        yield sloc + ("mode",), f"{sharing.mode} is only supported by the NVIDIA device plugin, not {device.resource}"


def _dangling_placement(loc: Loc, tenant: Tenant, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """The tenant's clusters, pools and edge groups that name nothing declared."""
    for k, name in enumerate(tenant.clusters):
        if name not in clusters:
            yield loc + ("clusters", k), f"unknown cluster {name!r}"
    mine = [clusters[n] for n in tenant.clusters if n in clusters]
    for k, name in enumerate(tenant.pools or []):
        if not any(name in group_names(c).pool for c in mine):
            yield loc + ("pools", k), f"unknown pool {name!r} in the tenant's clusters {tenant.clusters}"
    for k, name in enumerate(tenant.edge_groups):
        if not any(name in group_names(c).edge_group for c in mine):
            yield loc + ("edge_groups", k), f"unknown edge group {name!r} in the tenant's clusters {tenant.clusters}"


def _edge_continuity_checks(loc: Loc, cluster: Cluster, group: EdgeGroup, env: Environment,
                            where: Callable[[Loc], str]) -> Iterator[tuple[Loc, str]]:
    """The model cache fits the nodes' disk; offline work names tenants and classes that may run there."""
    if group.model_cache:
        yield from _duplicates(((loc + ("model_cache", k), m.name) for k, m in enumerate(group.model_cache)), "cached model", where)
        needed = sum(m.size_gb for m in group.model_cache)
        if group.disk_gb is None:
            yield loc + ("model_cache",), f"a model cache of {needed} GB needs the nodes' disk: declare disk_gb on the edge group"
        elif needed > group.disk_gb:
            yield loc + ("model_cache",), (f"the cached models need {needed} GB on every node, more than its disk_gb {group.disk_gb}: "
                                           "remove a model or raise disk_gb")
    work = group.offline_work
    if work is None:
        return
    wloc = loc + ("offline_work",)
    tenants = {t.name: t for t in env.tenants}
    declared = {pc.name for pc in env.priority_classes}
    for k, name in enumerate(work.tenants):
        tenant = tenants.get(name)
        if tenant is None:
            yield wloc + ("tenants", k), f"unknown tenant {name!r}"
        elif cluster.name not in tenant.clusters or group.name not in tenant.edge_groups:
            yield wloc + ("tenants", k), f"tenant {name} may not use edge group {group.name}: list {cluster.name} in its clusters and {group.name} in its edge_groups"
        else:
            allowed = tenant_classes(tenant, env, lambda pc: True)
            for c, cls_name in enumerate(work.priority_classes):
                if cls_name in declared and cls_name not in allowed:
                    yield wloc + ("priority_classes", c), f"tenant {name} may not use priority class {cls_name} (its classes: {', '.join(allowed) or 'none'})"
    for c, cls_name in enumerate(work.priority_classes):
        if cls_name not in declared:
            yield wloc + ("priority_classes", c), f"unknown priority class {cls_name!r}"
    capacity = group_capacity(group).get(group.device.resource, 0)
    if work.devices > capacity:
        yield wloc + ("devices",), f"{work.devices} {group.device.resource} for offline work, more than the group's {capacity}"


def _overlapping_matches(ci: int, cluster: Cluster) -> Iterator[tuple[Loc, str]]:
    """Two groups of a cluster whose matches can claim one node (fleetops.nodematch decides it exactly)."""
    from fleetops import nodematch

    def labels(group: Pool | EdgeGroup) -> dict[str, str]:
        # A device allow list admits by node name alone, and a node writes its own labels: no label
        # may take a name of such a group into another group.
        return {} if isinstance(group, EdgeGroup) and group.fingerprints else group.match.labels

    groups = [(kind, gi, g) for kind, members in (("pools", cluster.pools), ("edge_groups", cluster.edge_groups)) for gi, g in enumerate(members)]
    for m, n in nodematch.prefix_pairs([g.match.name_pattern for _, _, g in groups]):
        (kind, gi, group), earlier = groups[n], groups[m][2]
        name = nodematch.overlap(earlier.match.name_pattern, labels(earlier), group.match.name_pattern, labels(group))
        if name is not None:
            example = f"a node named {name!r}" if name else "any node name"
            yield ("clusters", ci, kind, gi, "match"), (f"overlaps the match of {earlier.name} ({example} matches both): "
                                                        "a node must belong to one group; make the name patterns or labels disjoint")


def cross_checks(env: Environment, where: Callable[[Loc], str] = format_loc) -> Iterator[tuple[Loc, str]]:
    """Rules that span fields: unique names, references that resolve, sharing valid for the device."""
    yield from _duplicates(((("clusters", i), c.name) for i, c in enumerate(env.clusters)), "cluster", where)
    yield from _duplicates(((("tenants", i), t.name) for i, t in enumerate(env.tenants)), "tenant", where)
    yield from _duplicates(((("priority_classes", i), p.name) for i, p in enumerate(env.priority_classes)), "priority class", where)
    yield from _duplicates(((("network", "center_endpoints", i), e.name) for i, e in enumerate(env.network.center_endpoints)), "endpoint", where)
    # Pools and edge groups become Kueue ResourceFlavors and node labels: unique fleet-wide.
    groups = [
        (("clusters", ci, kind, gi), g.name)
        for ci, c in enumerate(env.clusters)
        for kind, members in (("pools", c.pools), ("edge_groups", c.edge_groups))
        for gi, g in enumerate(members)
    ]
    yield from _duplicates(groups, "pool or edge group", where)
    if env.api is not None and env.api.cluster not in {c.name for c in env.clusters}:
        yield ("api", "cluster"), f"no cluster named {env.api.cluster!r} to deploy the fleet API to"

    for ci, cluster in enumerate(env.clusters):
        for pi, pool in enumerate(cluster.pools):
            loc: Loc = ("clusters", ci, "pools", pi)
            yield from _sharing_checks(loc, pool.device, pool.sharing)
            if plugin_kind(pool.device.resource) is None:
                yield loc + ("device", "resource"), f"no device plugin is known for {pool.device.resource}"
        for kind, members in (("pools", cluster.pools), ("edge_groups", cluster.edge_groups)):
            for gi, group in enumerate(members):
                for key in sorted(set(group.labels) & RESERVED_LABELS):
                    yield ("clusters", ci, kind, gi, "labels", key), f"{key} is set by fleetops from the {kind[:-1].replace('_', ' ')} itself"
                for k, taint in enumerate(group.taints):
                    if taint.key == SPOT_TAINT.key:
                        yield ("clusters", ci, kind, gi, "taints", k, "key"), f"{taint.key} is set by fleetops on spot pools (spot: {{price: ...}})"
        yield from _overlapping_matches(ci, cluster)
        for gi, group in enumerate(cluster.edge_groups):
            loc = ("clusters", ci, "edge_groups", gi)
            if cluster.role != "edge":
                yield loc, f"edge groups belong to clusters with role edge; {cluster.name} has role {cluster.role}"
            if group.fingerprints and not group.match.name_pattern:
                # A kubelet's certificate request shows the node name only: that is what admits a device.
                yield loc + ("match",), "an edge group with fingerprints needs match.name_pattern: a device is admitted by the node name its certificate request asks for"
            yield from _edge_continuity_checks(loc, cluster, group, env, where)
            if plugin_kind(group.device.resource) is None:
                yield loc + ("device", "resource"), f"no device plugin is known for {group.device.resource}"

    models = {g.device.model for c in env.clusters for g in (*c.pools, *c.edge_groups) if not is_spot(g)}  # a spot pool has its own
    for model in sorted(models - set(env.prices)):
        yield ("prices",), f"no price per device-hour for device model {model!r}"

    clusters: dict[str, Cluster] = {}
    for c in env.clusters:  # a duplicate name is reported above; resolve references to the first
        clusters.setdefault(c.name, c)
    classes = {p.name for p in env.priority_classes}
    endpoints = {e.name for e in env.network.center_endpoints}
    tenant_names = {t.name for t in env.tenants}
    yield from _unused_spot_pools(env)
    reserved = {*SYSTEM_NAMESPACES, env.reconciler.namespace, env.monitoring.namespace, env.monitoring.dcgm_namespace,
                env.monitoring.npu_exporter_namespace, env.monitoring.jetson_exporter_namespace}
    for ti, tenant in enumerate(env.tenants):
        loc = ("tenants", ti)
        if tenant.name in reserved:
            # The tenant's namespace gets default-deny and fleetops' ownership: never a system or fleetops one.
            yield loc + ("name",), f"{tenant.name!r} is a reserved namespace ({', '.join(sorted(reserved))}); pick another tenant name"
        for field_name, names in (("clusters", tenant.clusters), ("pools", tenant.pools or []), ("edge_groups", tenant.edge_groups)):
            yield from _duplicates((((*loc, field_name, k), n) for k, n in enumerate(names)), field_name.rstrip("s").replace("_", " "), where, named=False)
        dangling = list(_dangling_placement(loc, tenant, clusters))
        yield from dangling
        yield from _spot_without_preemptible_class(loc, tenant, clusters, set(preemptible_classes(tenant, env)))
        yield from _accepted_preemption(loc, tenant, env, clusters)
        for k, name in enumerate(tenant.priority_classes):
            if name not in classes:
                yield loc + ("priority_classes", k), f"unknown priority class {name!r}"
        for k, name in enumerate(tenant.network.allow_from_tenants):
            if name not in tenant_names:
                yield loc + ("network", "allow_from_tenants", k), f"unknown tenant {name!r}"
        for k, name in enumerate(tenant.network.allow_to_endpoints):
            if name not in endpoints:
                yield loc + ("network", "allow_to_endpoints", k), f"unknown center endpoint {name!r}"
        yield from _billing_checks(loc + ("billing",), tenant.billing)
        if tenant.spill_over is not None:
            yield from _spill_over_checks(loc + ("spill_over",), tenant, tenant.spill_over, clusters, where)
        mine = [clusters[n] for n in tenant.clusters if n in clusters]
        # What each cluster offers the tenant, taken once: not a walk over its groups for each resource.
        offered = {c.name: {r for g in eligible_groups(tenant, [c]) for r in group_capacity(g)} for c in mine} if tenant.quota else {}
        firm = {c.name: {r for g in eligible_groups(tenant, [c]) if not is_spot(g) for r in group_capacity(g)} for c in mine} if tenant.quota else {}
        for resource, quota in tenant.quota.items():
            qloc = loc + ("quota", resource)
            if quota.burst < quota.guaranteed:
                yield qloc + ("burst",), f"must be >= guaranteed ({quota.guaranteed}), got {quota.burst}"
            if dangling:  # which pools offer what is unknowable until the placement names real ones
                continue
            # The quota applies in every cluster of the tenant, so each must offer the resource.
            for cluster in mine:
                if resource not in offered[cluster.name]:
                    yield qloc, f"no pool or edge group of cluster {cluster.name} open to this tenant offers {resource}"
                elif quota.guaranteed and resource not in firm[cluster.name]:
                    # Guarantees are held on the tenant's other pools (modules/tenant.py): here there is none.
                    yield qloc + ("guaranteed",), (f"{quota.guaranteed} cannot be guaranteed: cluster {cluster.name} offers {resource} to this "
                                                   "tenant only on spot pools, which the provider may reclaim; set guaranteed: 0 and use burst, "
                                                   "or name a pool that is not spot")

            if quota.guaranteed_per_pool is not None:
                yield from _split_checks(qloc, resource, quota, tenant, mine)
    for cluster in clusters.values():
        yield from guarantee_placement(env, cluster).refused
    if env.scheduler.backend == "volcano":
        # Volcano's queues promised `deserved` through a capacity plugin whose scheduler configuration was
        # never rendered, and no real Volcano in the tests proved what they do: Kueue's are proven.
        yield ("scheduler", "backend"), ("volcano is no longer offered: fleetops proves what its quotas do on the real Kueue only; "
                                         "use backend: kueue")
    yield from _kueue_checks(env, clusters)
    yield from _queue_name_checks(env)
    yield from _service_checks(env, clusters, where)
    yield from _pin_checks(env, clusters)


def _pin_checks(env: Environment, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """A pin names a cluster of the file and a shard the reconciler's replicas have."""
    for name, index in env.reconciler.pins.items():
        loc = ("reconciler", "pins", name)
        if name not in clusters:
            yield loc, f"no cluster {name} in this environment (its clusters: {', '.join(sorted(clusters))})"
        elif index >= env.reconciler.replicas:
            yield loc, f"shard {index} does not exist: reconciler.replicas is {env.reconciler.replicas} (shards 0 .. {env.reconciler.replicas - 1})"


def _queue_name_checks(env: Environment) -> Iterator[tuple[Loc, str]]:
    """LocalQueue names derived from a tenant's or an edge group's name that no job could name in its
    queue label (QUEUE_NAME_MAX), refused at the name they grow from."""
    def too_long(name: str, queues: Iterable[str], owner: str) -> Iterator[str]:
        for queue in queues:
            if len(queue) > QUEUE_NAME_MAX:
                yield (f"its LocalQueue {queue} would be {len(queue)} characters, more than the {QUEUE_NAME_MAX} a label value holds: "
                       f"jobs name their queue in the label kueue.x-k8s.io/queue-name, so none could be submitted to it; shorten the "
                       f"{owner}'s name to at most {QUEUE_NAME_MAX - len(queue) + len(name)} characters")
                return

    for ti, tenant in enumerate(env.tenants):
        preempting, never = queue_names(tenant)
        queues = (preempting, never) if non_preempting_classes(tenant, env) else (preempting,)
        yield from ((("tenants", ti, "name"), message) for message in too_long(tenant.name, queues, "tenant"))
    for ci, cluster in enumerate(env.clusters):
        for gi, group in enumerate(cluster.edge_groups):
            if group.offline_work is not None:
                yield from ((("clusters", ci, "edge_groups", gi, "name"), message)
                            for message in too_long(group.name, (offline_queue_name(group),), "edge group"))


def _service_checks(env: Environment, clusters: dict[str, Cluster], where: Callable[[Loc], str]) -> Iterator[tuple[Loc, str]]:
    """What no HorizontalPodAutoscaler could honour: a service of no tenant, on pools its tenant may not
    use or that lack its device, replicas the wrong way round, nothing to scale on. Whether its max fits
    the tenant's burst and the budget is the policies' to judge (policies/autoscaling.rego)."""
    # Each is Deployment and HorizontalPodAutoscaler `name` in its tenant's namespace on its cluster.
    yield from _duplicates(((("services", i), f"{s.tenant}/{s.cluster}/{s.name}") for i, s in enumerate(env.services)), "service", where)
    tenants: dict[str, Tenant] = {}
    for t in env.tenants:
        tenants.setdefault(t.name, t)
    for si, service in enumerate(env.services):
        loc: Loc = ("services", si)
        tenant = tenants.get(service.tenant)
        if tenant is None:
            yield loc + ("tenant",), f"unknown tenant {service.tenant!r}"
            continue
        if "inference" not in tenant.workloads:
            yield loc + ("tenant",), f"tenant {tenant.name} does not run inference (its workloads: {', '.join(tenant.workloads)}): add inference to them"
        if service.cluster not in tenant.clusters or service.cluster not in clusters:
            yield loc + ("cluster",), f"{service.cluster!r} is not a cluster of tenant {tenant.name} (its clusters: {', '.join(tenant.clusters)})"
        else:
            open_to = {g.name: g for g in eligible_groups(tenant, [clusters[service.cluster]])}
            for k, name in enumerate(service.pools):
                group = open_to.get(name)
                if group is None:
                    yield loc + ("pools", k), f"{name} is no pool of {service.cluster} open to tenant {tenant.name} (open: {', '.join(open_to) or 'none'})"
                elif service.devices.resource not in group_capacity(group):
                    yield loc + ("pools", k), f"{name} offers no {service.devices.resource} (it offers {', '.join(group_capacity(group))})"
        if service.devices.resource not in tenant.quota:
            yield loc + ("devices", "resource"), f"tenant {tenant.name} has no quota for {service.devices.resource}, so Kueue admits none of its replicas: add it to the tenant's quota"
        if service.replicas.min > service.replicas.max:
            yield loc + ("replicas", "min"), f"must be <= max ({service.replicas.max}), got {service.replicas.min}"
        targets = service.targets
        if targets.gpu_utilisation_percent is None and targets.requests_waiting_per_replica is None:
            yield loc + ("targets",), "declare gpu_utilisation_percent or requests_waiting_per_replica (or both): the autoscaler needs a metric"
        if targets.requests_waiting_per_replica is not None and service.server is None:
            yield loc + ("server",), f"requests_waiting_per_replica needs the inference server (one of {', '.join(s.value for s in Server)}): it chooses the queue's series"


def _spill_over_checks(loc: Loc, tenant: Tenant, spill: SpillOver, clusters: dict[str, Cluster], where: Callable[[Loc], str]) -> Iterator[tuple[Loc, str]]:
    """A MultiKueue declaration that cannot work. MultiKueue creates the job on a worker in the same
    namespace and LocalQueue as on the manager, so each worker must hold the tenant's queues (be one
    of its clusters); the manager's LocalQueue of that name dispatches and runs nothing, so it cannot
    be a cluster where the tenant's queue holds quota (a worker, or any other of its clusters)."""
    if spill.manager not in clusters:
        yield loc + ("manager",), f"unknown cluster {spill.manager!r}"
    elif spill.manager in spill.workers:
        yield loc + ("manager",), (f"{spill.manager} is also a worker: MultiKueue dispatches from the manager's queue to the workers' queues "
                                   "of the same name, so one cluster cannot hold both; name another manager")
    elif spill.manager in tenant.clusters:
        yield loc + ("manager",), (f"{spill.manager} is one of the tenant's clusters, where its queue holds quota: the manager's queue of that "
                                   "name only dispatches; name a cluster the tenant is not on, or drop it from the tenant's clusters")
    yield from _duplicates((((*loc, "workers", k), n) for k, n in enumerate(spill.workers)), "worker", where, named=False)
    for k, name in enumerate(spill.workers):
        if name not in clusters:
            yield loc + ("workers", k), f"unknown cluster {name!r}"
        elif name not in tenant.clusters and name != spill.manager:
            yield loc + ("workers", k), (f"the tenant is not on {name}, so it has no queue there for MultiKueue to create its jobs in: "
                                         f"add {name} to the tenant's clusters")
    workers = [clusters[n] for n in dict.fromkeys(spill.workers) if n in clusters and n in tenant.clusters]
    if workers and (problem := kueue_limit_problem(bundles(sorted(tenant.quota), eligible_groups(tenant, workers)))):
        yield loc + ("workers",), f"{problem} (its ClusterQueue on the manager {spill.manager}, over every worker's pools): name fewer workers"


def _billing_checks(loc: Loc, billing: Billing) -> Iterator[tuple[Loc, str]]:
    """Top-ups and a low-balance threshold mean something for prepaid tenants only, and prepaid needs money in."""
    if billing.mode == "postpaid":
        if billing.top_ups:
            yield loc + ("top_ups",), "top-ups are for prepaid tenants; this one is postpaid (set mode: prepaid, or remove them)"
        if billing.low_balance_at is not None:
            yield loc + ("low_balance_at",), "a low-balance alert is for prepaid tenants; this one is postpaid"
    elif not billing.top_ups:
        yield loc + ("top_ups",), "a prepaid tenant needs at least one top-up (top_ups: [{date: 2026-11-01, amount: ...}])"


def _within_kueue(resources: int, flavors: int) -> bool:
    """Whether any resource groups of so many resources and flavors are within Kueue's limits."""
    return resources <= KUEUE.groups and flavors <= KUEUE.per_group and resources * flavors <= KUEUE.combinations


def _kueue_checks(env: Environment, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """What the API server or Kueue would refuse at apply: resource groups past Kueue's limits (the
    cluster's Cohort, each tenant's Cohort and ClusterQueues), and a tenant whose ClusterQueue takes
    the name of another tenant's non-preempting one."""
    for ci, cluster in enumerate(env.clusters):
        groups = [*cluster.pools, *cluster.edge_groups]
        problem = kueue_limit_problem(bundles(sorted({r for g in groups for r in group_capacity(g)}), groups))
        if problem:
            yield ("clusters", ci, "pools"), f"{problem} (the cluster's Cohort {cluster.name}): move pools to another cluster"
    owners: dict[tuple[str, str], str] = {}  # (cluster, ClusterQueue) -> the tenant whose non-preempting queue it is
    for tenant in env.tenants:
        if non_preempting_classes(tenant, env):
            for name in tenant.clusters:
                owners.setdefault((name, f"{tenant.name}-{NON_PREEMPTING}"), tenant.name)
    for ti, tenant in enumerate(env.tenants):
        for name in dict.fromkeys(tenant.clusters):
            if (owner := owners.get((name, tenant.name))) is not None:
                yield ("tenants", ti, "name"), (f"{tenant.name!r} is the name of tenant {owner}'s non-preempting ClusterQueue on {name} "
                                                "(for its classes declared preemption: Never): pick another tenant name")
                break
        # Few resources on few pools cannot reach a limit: only a larger tenant is grouped as Kueue would.
        if tenant.quota and any(not _within_kueue(len(tenant.quota), open_groups(tenant, clusters[name])) for name in tenant.clusters if name in clusters):
            for name in dict.fromkeys(tenant.clusters):
                if name in clusters and (problem := kueue_limit_problem(bundles(sorted(tenant.quota), eligible_groups(tenant, [clusters[name]])))):
                    yield ("tenants", ti, "quota"), f"{problem} (its ClusterQueue on {name}): name fewer pools, or fewer device resources"
                    break


def _split_checks(loc: Loc, resource: str, quota: Quota, tenant: Tenant, clusters: list[Cluster]) -> Iterator[tuple[Loc, str]]:
    """A declared split names only pools open to the tenant that offer the resource, and adds up to
    the guarantee in each of its clusters."""
    shares = quota.guaranteed_per_pool or {}
    offering = {c.name: [g.name for g in eligible_groups(tenant, [c]) if resource in group_capacity(g) and not is_spot(g)] for c in clusters}
    known = {name for names in offering.values() for name in names}
    for name in shares:
        if name not in known:
            yield loc + ("guaranteed_per_pool", name), f"{name} is no pool or edge group open to this tenant that offers {resource} (open: {', '.join(sorted(known)) or 'none'})"
    for cluster in clusters:
        total = sum(units for name, units in shares.items() if name in offering[cluster.name])
        if total != quota.guaranteed:
            yield loc + ("guaranteed_per_pool",), (f"the shares of {cluster.name}'s pools ({', '.join(offering[cluster.name])}) add up to {total}, "
                                                   f"not the guarantee {quota.guaranteed}: the guarantee applies in each cluster of the tenant")


def _spot_without_preemptible_class(loc: Loc, tenant: Tenant, clusters: dict[str, Cluster], preemptible: set[str]) -> Iterator[tuple[Loc, str]]:
    """The spot pools a tenant names although none of its priority classes may run there."""
    if preemptible:
        return
    for k, name in enumerate(tenant.pools or []):
        if any(is_spot(p) for n in tenant.clusters if n in clusters for _, p in group_names(clusters[n]).pool.get(name, ())):
            yield loc + ("pools", k), (f"{name} is a spot pool, but none of the tenant's priority classes is preemptible: its work "
                                       "could never run there; mark a class it uses `preemptible: true`, or accept one for this tenant "
                                       "in its preemptible_classes, or remove the pool")


def _accepted_preemption(loc: Loc, tenant: Tenant, env: Environment, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """The classes a tenant accepts preemption for are its own, and mean something only on a spot pool it names."""
    if not tenant.preemptible_classes:
        return
    declared = {pc.name for pc in env.priority_classes}
    allowed = tenant_classes(tenant, env, lambda pc: True)
    for k, name in enumerate(tenant.preemptible_classes):
        if name not in declared:
            yield loc + ("preemptible_classes", k), f"unknown priority class {name!r}"
        elif name not in allowed:
            yield loc + ("preemptible_classes", k), f"tenant {tenant.name} may not use priority class {name} (its classes: {', '.join(allowed) or 'none'})"
    if not any(is_spot(p) for n in tenant.clusters if n in clusters for name in tenant.pools or [] for _, p in group_names(clusters[n]).pool.get(name, ())):
        yield loc + ("preemptible_classes",), ("the tenant names no spot pool, where alone preemption is accepted: name one in its pools, "
                                               "or remove preemptible_classes")


def _unused_spot_pools(env: Environment) -> Iterator[tuple[Loc, str]]:
    """Spot pools that no tenant names: spot capacity is opened to a tenant only by naming it (eligible_groups)."""
    named = {(c, p) for t in env.tenants for c in t.clusters for p in t.pools or []}
    for ci, cluster in enumerate(env.clusters):
        for pi, pool in enumerate(cluster.pools):
            if is_spot(pool) and (cluster.name, pool.name) not in named:
                yield ("clusters", ci, "pools", pi, "spot"), (f"no tenant may use spot pool {pool.name}: name it in the pools of a "
                                                              f"tenant of cluster {cluster.name} with a preemptible priority class")
