"""What an environment's pools and edge groups hold: physical devices, schedulable units per device
resource after sharing (time-slicing, MIG), per cluster, and the quotas drawn from them."""

from collections.abc import Callable
from typing import Any

from fleetops import mig
from fleetops.spec.fields import Cluster, Environment, Group, Pool, Service, Sharing, group_names, named_groups


def physical_devices(group: Group) -> int:
    return group.nodes * group.device.per_node


def group_capacity(group: Group) -> dict[str, int]:
    """Schedulable units per device resource, after sharing: what quotas are drawn from."""
    devices = physical_devices(group)
    sharing = group.sharing if isinstance(group, Pool) else Sharing()
    if sharing.mode == "time-slicing":
        return {group.device.resource: devices * (sharing.replicas or 1)}
    if sharing.mode == "mig" and sharing.mig is not None:
        if sharing.mig.strategy == "single":
            (count,) = sharing.mig.profiles.values()
            return {group.device.resource: devices * count}
        return {mig_resource(profile): devices * count for profile, count in sorted(sharing.mig.profiles.items())}
    return {group.device.resource: devices}


def mig_resource(profile: str) -> str:
    """The resource the NVIDIA device plugin advertises for a profile with strategy mixed ("+" becomes ".")."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def cluster_by_name(env: Environment, name: str) -> Cluster:
    return next(c for c in env.clusters if c.name == name)


def _per_resource(env: Environment, amount: Callable[[Group, int], int]) -> dict[str, dict[str, int]]:
    """cluster -> device resource -> the sum over its groups of `amount(group, schedulable units)`."""
    out: dict[str, dict[str, int]] = {}
    for cluster in env.clusters:
        per = out.setdefault(cluster.name, {})
        for group in (*cluster.pools, *cluster.edge_groups):
            for resource, count in group_capacity(group).items():
                per[resource] = per.get(resource, 0) + amount(group, count)
    return out


def capacity(env: Environment) -> dict[str, dict[str, int]]:
    """cluster -> device resource -> schedulable units."""
    return _per_resource(env, lambda group, units: units)


def physical(env: Environment) -> dict[str, dict[str, float]]:
    """cluster -> device resource -> physical devices behind its units; summed over a cluster's
    resources, each device counts once (`physical_shares`)."""
    out: dict[str, dict[str, float]] = {}
    for cluster in env.clusters:
        per = out.setdefault(cluster.name, {})
        for group in (*cluster.pools, *cluster.edge_groups):
            for resource, share in physical_shares(group).items():
                per[resource] = round(per.get(resource, 0) + share, 2)
    return out


def physical_shares(group: Group) -> dict[str, float]:
    """The group's physical devices per resource it offers. A GPU cut into several MIG profiles
    (strategy mixed) is shared between their resources by the memory slices each takes, so that the
    GPU is counted once, not once per profile."""
    devices = physical_devices(group)
    units = group_capacity(group)
    family = mig.family_of(group.device.model)
    if len(units) == 1 or not isinstance(group, Pool) or group.sharing.mig is None or family is None:
        return dict.fromkeys(units, devices)
    slices = {mig_resource(name): family.profiles[name].memory * count for name, count in group.sharing.mig.profiles.items()}
    total = sum(slices.values())
    return {resource: devices * taken / total for resource, taken in slices.items()}


def quota_sums(env: Environment) -> dict[str, dict[str, dict[str, int]]]:
    """cluster -> device resource -> {"guaranteed": sum, "burst": sum} over tenants placed there."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for tenant in env.tenants:
        for cluster in tenant.clusters:
            for resource, quota in tenant.quota.items():
                slot = out.setdefault(cluster, {}).setdefault(resource, {"guaranteed": 0, "burst": 0})
                slot["guaranteed"] += quota.guaranteed
                slot["burst"] += quota.burst
    return out


def capacity_rows(env: Environment) -> list[dict[str, Any]]:
    """Per cluster and device resource: physical devices, schedulable units (after time-slicing or MIG)
    and their ratio, guaranteed and burst sums, headroom %."""
    sums, devices = quota_sums(env), physical(env)
    rows = []
    for cluster, per in capacity(env).items():
        for resource, units in sorted(per.items()):
            q = sums.get(cluster, {}).get(resource, {"guaranteed": 0, "burst": 0})
            real = devices[cluster][resource]
            rows.append(
                {
                    "cluster": cluster,
                    "resource": resource,
                    "physical": int(real) if real == int(real) else real,
                    "capacity": units,
                    "sharing_factor": round(units / real, 2) if real else 0.0,
                    "guaranteed": q["guaranteed"],
                    "burst": q["burst"],
                    "headroom_percent": round(100 * (units - q["guaranteed"]) / units, 1) if units else 0.0,
                }
            )
    return rows


def is_spot(group: Group) -> bool:
    return isinstance(group, Pool) and group.spot is not None


def service_pools(env: Environment, service: Service) -> list[Pool]:
    """The declared pools a service names on its cluster (validation refuses one that is not there)."""
    cluster = next((c for c in env.clusters if c.name == service.cluster), None)
    return named_groups(group_names(cluster).pool, service.pools) if cluster is not None else []
