"""What an environment's devices cost: prices per device-hour (a spot pool's own), per schedulable
unit, per month; what a change of prices costs a month; and what a revision under review is judged at,
its base revision's reference prices."""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetops.spec.devices import group_capacity, is_spot, physical_devices, physical_shares, service_pools
from fleetops.spec.fields import Environment, Group, Pool, Service

HOURS_PER_MONTH = 730


def device_hour_price(env: Environment, group: Group) -> float:
    """What one of the group's devices costs per hour: a spot pool's own price, else its model's."""
    if isinstance(group, Pool) and group.spot is not None:
        return group.spot.price
    return env.prices.get(group.device.model, 0.0)


def group_monthly_cost(env: Environment, group: Group) -> float:
    """A group's physical devices priced per device-hour, for a 730-hour month (not rounded: sums round once)."""
    return physical_devices(group) * device_hour_price(env, group) * HOURS_PER_MONTH


def monthly_cost(env: Environment) -> float:
    """Every declared physical device priced per device-hour, for a 730-hour month."""
    return round(sum(group_monthly_cost(env, g) for c in env.clusters for g in (*c.pools, *c.edge_groups)), 2)


def unit_hour_price(env: Environment, group: Group, resource: str) -> float:
    """What one schedulable unit of `resource` costs per hour on the group: its device's price times the
    share of a device the unit is (a quarter on a 4-way time-sliced GPU, a seventh of a 1g.10gb MIG slice)."""
    units = group_capacity(group).get(resource, 0)
    return device_hour_price(env, group) * physical_shares(group).get(resource, 0) / units if units else 0.0


def replica_monthly_cost(env: Environment, service: Service) -> float:
    """One replica's devices for a 730-hour month, on the dearest of its pools (where the scheduler may put it)."""
    price = max((unit_hour_price(env, p, service.devices.resource) for p in service_pools(env, service)), default=0.0)
    return service.devices.count * price * HOURS_PER_MONTH


# --- what a change of prices costs -------------------------------------------------------------


def repriced_monthly_cost(before: Environment, after: Environment, was: Group | None, group: Group) -> float:
    """What head's `group` costs a month more (less) for the prices the change edited alone: its devices at
    head's price less at the base's price of the same model (a spot pool that was spot: its base spot price).
    A model or spot pool the base does not price is no price change: what it costs is new capacity."""
    price = device_hour_price(after, group)
    if is_spot(group):
        base = was.spot.price if was is not None and isinstance(was, Pool) and was.spot is not None else price
    else:
        base = before.prices.get(group.device.model, price)
    return physical_devices(group) * (price - base) * HOURS_PER_MONTH


def price_change_cost(before: Environment | None, after: Environment | None) -> float:
    """What the change's price edits alone do to the monthly cost, apart from the devices it adds or
    removes: head's fleet at head's prices less the same fleet at the base's (`repriced_monthly_cost`)."""
    if before is None or after is None:
        return 0.0
    old = {(c.name, g.name): g for c in before.clusters for g in (*c.pools, *c.edge_groups)}
    return round(sum(repriced_monthly_cost(before, after, old.get((c.name, g.name)), g)
                     for c in after.clusters for g in (*c.pools, *c.edge_groups)), 2)


def model_price_change(after: Environment, model: str, was: float, now: float) -> tuple[int, float]:
    """A model's price edited from `was` to `now`: head's on-demand devices of that model (a spot pool has its
    own price), and what they cost a month more (less)."""
    devices = sum(physical_devices(g) for c in after.clusters for g in (*c.pools, *c.edge_groups) if g.device.model == model and not is_spot(g))
    return devices, (now - was) * devices * HOURS_PER_MONTH


# --- the price a change is judged at -------------------------------------------------------------

class Basis(str, enum.Enum):
    """Where a group's reference price per device-hour comes from, all in the base revision."""

    MODEL = "model"  # its device model's price: a cut of it is a price change of the model (plan's price_changes)
    GROUP = "group"  # what the same pool or edge group cost: its model renamed, made spot, or its spot price cut
    ON_DEMAND = "on-demand"  # a new spot pool: its model's price, which the spot price discounts
    RESOURCE = "resource"  # a model the base does not price: the highest price the base knows for its device resource
    HIGHEST = "highest"  # a resource, or a model no group uses, the base does not price: its highest price of all


@dataclass(frozen=True)
class Reference:
    """The prices per device-hour a revision under review is judged at, read from its base revision,
    which the change cannot set alone: each model's price, what each pool and edge group cost, and the
    highest price known for each device resource. A renamed model or a new spot pool is no discount."""

    models: Mapping[str, float]
    groups: Mapping[tuple[str, str, str], tuple[Group, float]]  # (cluster, kind, name) -> the base's group and its price
    resources: Mapping[str, float]
    highest: float | None  # None: the base prices nothing (no base environment)

    @classmethod
    def of(cls, base: Environment | None) -> "Reference":
        if base is None:
            return cls({}, {}, {}, None)
        groups: dict[tuple[str, str, str], tuple[Group, float]] = {}
        resources: dict[str, float] = {}
        for cluster in base.clusters:
            for group in (*cluster.pools, *cluster.edge_groups):
                price = device_hour_price(base, group)
                groups.setdefault((cluster.name, type(group).__name__, group.name), (group, price))
                known = max(price, base.prices.get(group.device.model, 0.0))
                resources[group.device.resource] = max(resources.get(group.device.resource, 0.0), known)
        return cls(dict(base.prices), groups, resources, max([*base.prices.values(), *resources.values()], default=None))

    def of_group(self, cluster: str, group: Group) -> tuple[float, Basis] | None:
        """The price `group` of `cluster` is judged at, and where it comes from; None where the base knows no price."""
        model, spot = group.device.model, is_spot(group)
        was = self.groups.get((cluster, type(group).__name__, group.name))
        if was is not None:
            before, price = was
            if not spot and not is_spot(before) and before.device.model == model and model in self.models:
                return self.models[model], Basis.MODEL
            return price, Basis.GROUP
        if model in self.models:
            return self.models[model], Basis.ON_DEMAND if spot else Basis.MODEL
        if group.device.resource in self.resources:
            return self.resources[group.device.resource], Basis.RESOURCE
        return (self.highest, Basis.HIGHEST) if self.highest is not None else None


def judged_hour_price(reference: Reference, env: Environment, cluster: str, group: Group) -> float:
    """The group's price per device-hour as judged: its own, or its reference where that is higher."""
    ref = reference.of_group(cluster, group)
    return max(device_hour_price(env, group), ref[0] if ref else 0.0)


def cost_at_reference(reference: Reference, env: Environment) -> float:
    """Every physical device at its judged price per device-hour, for a 730-hour month."""
    return round(sum(physical_devices(g) * judged_hour_price(reference, env, c.name, g) * HOURS_PER_MONTH
                     for c in env.clusters for g in (*c.pools, *c.edge_groups)), 2)


BASIS_TEXT = {
    Basis.GROUP: "what it cost per device-hour in the base revision",
    Basis.ON_DEMAND: "the base revision's price of its model, which a new spot pool's price discounts",
    Basis.RESOURCE: "the highest price of {resource} in the base revision, for a model the base does not price",
    Basis.HIGHEST: "the highest price in the base revision, for a device the base does not price",
}


def below_reference(reference: Reference, env: Environment) -> list[dict[str, Any]]:
    """Each price the change set below its reference, for the approval it needs: a pool or edge group
    priced below its reference, and a model priced for the first time below the highest price the base
    knows, though no group uses it yet (a later change could use it at that price). A cut of a model's
    own price is left to the price change it is (Basis.MODEL)."""
    out: list[dict[str, Any]] = []
    for cluster in env.clusters:
        for group in (*cluster.pools, *cluster.edge_groups):
            ref, price = reference.of_group(cluster.name, group), device_hour_price(env, group)
            if ref is None or ref[1] is Basis.MODEL or price >= ref[0]:
                continue
            kind = "pool" if isinstance(group, Pool) else "edge group"
            out.append({"subject": f"{kind} {cluster.name}/{group.name} ({group.device.model}{', spot' if is_spot(group) else ''})",
                        "price": price, "reference": ref[0], "basis": BASIS_TEXT[ref[1]].format(resource=group.device.resource),
                        "resource": {"cluster": cluster.name, "kind": type(group).__name__, "name": group.name}})
    used = {g.device.model for c in env.clusters for g in (*c.pools, *c.edge_groups)}
    if reference.highest is not None:
        for model, price in sorted(env.prices.items()):
            if model not in reference.models and model not in used and price < reference.highest:
                out.append({"subject": f"device model {model}", "price": price, "reference": reference.highest,
                            "basis": BASIS_TEXT[Basis.HIGHEST], "resource": {"kind": "Price", "name": model}})
    return out
