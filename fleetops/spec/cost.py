"""What an environment's devices cost: prices per device-hour (a spot pool's own), per schedulable
unit, per month."""

from fleetops.spec.devices import group_capacity, physical_devices, physical_shares, service_pools
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
