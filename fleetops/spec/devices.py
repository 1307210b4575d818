"""What an environment's pools and edge groups hold: physical devices, schedulable units per device
resource after sharing (time-slicing, MIG), per cluster, and the quotas drawn from them."""

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Capacity:
    """One cluster's device resource: physical devices, schedulable units (after time-slicing or MIG) and
    their ratio, guaranteed and burst sums, headroom %."""

    physical: float
    schedulable: float
    sharing_factor: float
    guaranteed: int
    burst: int
    headroom_percent: float

    @classmethod
    def of(cls, physical: float, schedulable: float, guaranteed: int, burst: int) -> "Capacity":
        """The figures, with the sharing factor and headroom derived from them (one cluster's, or summed)."""
        return cls(physical=physical, schedulable=schedulable, guaranteed=guaranteed, burst=burst,
                   sharing_factor=round(schedulable / physical, 2) if physical else 0.0,
                   headroom_percent=round(100 * (schedulable - guaranteed) / schedulable, 1) if schedulable else 0.0)


NO_CAPACITY = Capacity(physical=0, schedulable=0, sharing_factor=0.0, guaranteed=0, burst=0, headroom_percent=0.0)


@dataclass(frozen=True)
class ClusterCapacity:
    """A cluster's device resource and its capacity: the one row `validate`'s table, `check` and `audit`
    (`to_dict`) and plan's before/after (`plan_result.CapacityChange`) are made of."""

    cluster: str
    resource: str
    capacity: Capacity

    def to_dict(self) -> dict[str, Any]:
        """As `check --output json` and audit publish a row (the schema's `capacity_row`): units as `capacity`."""
        c = self.capacity
        return {"cluster": self.cluster, "resource": self.resource, "physical": c.physical, "capacity": c.schedulable,
                "sharing_factor": c.sharing_factor, "guaranteed": c.guaranteed, "burst": c.burst, "headroom_percent": c.headroom_percent}


def capacity_rows(env: Environment) -> list[ClusterCapacity]:
    """Per cluster and device resource: physical devices, schedulable units (after time-slicing or MIG)
    and their ratio, guaranteed and burst sums, headroom %."""
    sums, devices = quota_sums(env), physical(env)
    rows = []
    for cluster, per in capacity(env).items():
        for resource, units in sorted(per.items()):
            q = sums.get(cluster, {}).get(resource, {"guaranteed": 0, "burst": 0})
            real = devices[cluster][resource]
            # A whole number of devices is written as one (8, not 8.0).
            rows.append(ClusterCapacity(cluster, resource, Capacity.of(int(real) if real == int(real) else real, units, q["guaranteed"], q["burst"])))
    return rows


def is_spot(group: Group) -> bool:
    return isinstance(group, Pool) and group.spot is not None


def service_pools(env: Environment, service: Service) -> list[Pool]:
    """The declared pools a service names on its cluster (validation refuses one that is not there)."""
    cluster = next((c for c in env.clusters if c.name == service.cluster), None)
    return named_groups(group_names(cluster).pool, service.pools) if cluster is not None else []
