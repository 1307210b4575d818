"""Metering: what each tenant's running pods hold of the fleet's devices, and what that costs.

One PrometheusRule, `fleetops-metering`, per cluster in the monitoring namespace. Its recording
rules are the metric contract the statements (`fleetops statements`) and plan's utilisation read:

- `fleetops:tenant_devices:physical{cluster, pool, tenant, resource}`: the devices a tenant's running
  pods request on a pool's nodes, divided by the pool's sharing factor (time-slicing replicas, MIG
  instances per GPU), so it counts physical devices; `resource` is the pool's declared device resource.
- `fleetops:tenant_spend:per_hour{cluster, pool, tenant, currency}`: the above x the price per
  device-hour (`prices`, or a spot pool's own).
- `fleetops:pool_devices:physical{cluster, pool, resource}`: the physical devices the pool's nodes offer
  (their allocatable units over the same sharing factor).
- `fleetops:pool_idle_devices:physical{cluster, pool}` and `fleetops:pool_idle_spend:per_hour{cluster, pool,
  currency}`: the capacity no tenant's running pod holds, and its cost at the same price: what the statements
  show as idle. A tenant's share of a shared GPU and the idle rest are cut by one sharing factor, so the
  tenants' spend and the idle spend of a pool add up to its whole devices' cost, each minute.

They are built from kube-state-metrics series, which must carry the pool and tenant labels:
`--metric-labels-allowlist=nodes=[fleetops.io/pool,fleetops.io/edge-group],namespaces=[fleetops.io/tenant]`.

The first cluster's rule also holds the run-time budget: month-to-date spend against each
`budget.alert_at` and prepaid balances against `low_balance_at`. They sum every cluster's spend, so
that cluster's Prometheus must receive the others' `fleetops:tenant_spend:per_hour` (federation or
remote write); a Prometheus per cluster without that would compare one cluster's spend to the whole
budget.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from typing import Any

from fleetops import kube, metrics, spec
from fleetops.metrics import BALANCE, DEVICES, IDLE_DEVICES, IDLE_SPEND, MONTH_TO_DATE, POOL_DEVICES, PREPAID_SPEND, SPEND, SPEND_BY_MONTH
from modules.kube import Part, Target
from modules.monitoring import alert, prometheus_rule

RULE_NAME = "fleetops-metering"
METERING_INTERVAL = "1m"
# The budget group sums its own samples (no subquery: a month of 1m steps for every tenant, every
# evaluation, would be the most expensive rule on the server): each sample stands for this many minutes.
BUDGET_MINUTES = 5
BALANCE_RANGE = "366d"  # prepaid spend counted back this far: Prometheus's retention must cover it
MONTH_RANGE = "31d"  # the longest month; samples of other months are dropped by their month label


def ksm_name(name: str) -> str:
    """A Kubernetes name as kube-state-metrics writes it into a label name or a `resource` value."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def sharing_factors(group: spec.Group) -> dict[str, float]:
    """Schedulable units per physical device, for each resource the group offers: 4 for time-slicing
    with 4 replicas, 7 for MIG 1g.10gb x7, 2 and 4 for a GPU cut into one 3g and two 2g instances."""
    shares = spec.physical_shares(group)
    return {resource: units / shares[resource] for resource, units in spec.group_capacity(group).items() if shares[resource]}


def _number(value: float) -> str:
    return f"{value:.12g}"


def _physical(metric: str, group: spec.Group) -> str:
    """`metric`'s units of each resource the group offers over its sharing factor: physical devices, per series."""
    return " or ".join(
        f'{metric}{{resource="{ksm_name(resource)}"}}' + ("" if factor == 1 else f" / {_number(factor)}")
        for resource, factor in sorted(sharing_factors(group).items())
    )


def _nodes(group: spec.Group) -> str:
    """kube-state-metrics' series of the group's nodes, to join on `node`."""
    node_label = "label_" + ksm_name(kube.POOL_LABEL if isinstance(group, spec.Pool) else kube.EDGE_GROUP_LABEL)
    return f'{metrics.NODE_LABELS}{{{node_label}="{group.name}"}}'


def devices_expr(group: spec.Group) -> str:
    """Physical devices held per tenant on `group`: running pods' requests over the sharing factor."""
    tenant_label = "label_" + ksm_name(kube.TENANT_LABEL)
    # kube_pod_status_phase is 1 for the pod's phase and 0 for the others: a pending pod counts 0, and
    # a tenant's series stays continuous while its pods exist.
    return (
        f"sum by (tenant) (\n"
        f"  ({_physical(metrics.POD_REQUESTS, group)})\n"
        f'  * on (namespace, pod) group_left () {metrics.POD_PHASE}{{phase="Running"}}\n'
        f"  * on (node) group_left () {_nodes(group)}\n"
        f'  * on (namespace) group_left (tenant) label_replace({metrics.NAMESPACE_LABELS}{{{tenant_label}!=""}}, "tenant", "$1", "{tenant_label}", "(.+)")\n'
        f")"
    )


def capacity_expr(group: spec.Group) -> str:
    """Physical devices the group's nodes offer: their allocatable units over the sharing factor."""
    return f"sum (\n  ({_physical(metrics.NODE_ALLOCATABLE, group)})\n  * on (node) group_left () {_nodes(group)}\n)"


def metering_rules(cluster: spec.Cluster, env: spec.Environment) -> list[dict[str, Any]]:
    """Per pool and edge group: its tenants' physical devices and their spend per hour, and its capacity; then what no
    tenant held of each, one rule for the cluster (a rule per pool was 0.3 MB more policy input for the large fleet),
    and what that cost, at each pool's price."""
    per_pool: list[dict[str, Any]] = []
    priced_idle: list[dict[str, Any]] = []
    currency = {"currency": env.budget.currency}
    for group in (*cluster.pools, *cluster.edge_groups):
        where = {"cluster": cluster.name, "pool": group.name}
        selector = f'{{cluster="{cluster.name}", pool="{group.name}"}}'
        price = _number(spec.device_hour_price(env, group))
        per_pool += [
            {"record": DEVICES, "expr": devices_expr(group), "labels": {**where, "resource": group.device.resource}},
            {"record": SPEND, "expr": f"sum without (resource) ({DEVICES}{selector}) * {price}", "labels": currency},
            {"record": POOL_DEVICES, "expr": capacity_expr(group), "labels": {**where, "resource": group.device.resource}},
        ]
        priced_idle.append({"record": IDLE_SPEND, "expr": f"{IDLE_DEVICES}{selector} * {price}", "labels": currency})
    if not per_pool:
        return []
    on = f'{{cluster="{cluster.name}"}}'
    capacity = f"sum by (cluster, pool) ({POOL_DEVICES}{on})"
    # A pool without any tenant series is no tenant's use: its whole capacity is idle; one without capacity has no idle series.
    idle = {"record": IDLE_DEVICES, "expr": f"clamp_min({capacity} - (sum by (cluster, pool) ({DEVICES}{on}) or {capacity} * 0), 0)"}
    return [*per_pool, idle, *priced_idle]


def _this_month() -> str:
    """The evaluation's month as a one-series vector {month="11"}: a label a sample can be matched on."""
    return 'count_values ("month", month())'


def _unix(day: datetime.date) -> int:
    return int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc).timestamp())


def budget_rules(env: spec.Environment) -> list[dict[str, Any]]:
    """Month-to-date spend against the budget, and prepaid balances against their thresholds.

    PromQL has no "since the first of the month" range. Each spend sample is labelled with the month
    it was taken in; month-to-date sums the last 31 days of samples of the evaluation's month only.
    So it resets at 00:00 UTC on the first, whatever the month's length."""
    budget = env.budget
    slot = f"{BUDGET_MINUTES} / 60"
    rules: list[dict[str, Any]] = [
        {"record": SPEND_BY_MONTH, "expr": f"{SPEND} * on () group_left (month) {_this_month()}"},
        {"record": MONTH_TO_DATE,
         "expr": f"sum without (month) (sum_over_time({SPEND_BY_MONTH}[{MONTH_RANGE}]) * on (month) group_left () {_this_month()}) * {slot}"},
    ]
    for k, fraction in enumerate(sorted(budget.alert_at)):
        limit = fraction * budget.monthly
        rules.append(alert(
            "FleetopsBudgetMonthToDate",
            f'sum({MONTH_TO_DATE}{{currency="{budget.currency}"}}) > {_number(limit)}',
            severity="critical" if k == len(budget.alert_at) - 1 else "warning",
            labels={"threshold": _number(fraction)},
            summary=f"Month-to-date spend {{{{ $value | humanize }}}} {budget.currency} passed {fraction:.0%} "
                    f"of the monthly budget ({_number(budget.monthly)} {budget.currency})",
            description=f"What environment {env.environment} has spent since the 1st (00:00 UTC), over every cluster, pool and tenant, "
                        f"is {{{{ $value | humanize }}}} {budget.currency}: past {fraction:.0%} of its "
                        f"monthly budget of {_number(budget.monthly)} {budget.currency} (budget.alert_at). Spend goes on at the rate the "
                        f"running pods hold devices until they finish or are stopped.",
        ))
    for tenant in env.tenants:
        billing = tenant.billing
        if billing.mode != "prepaid":
            continue
        first = min(_unix(t.date) for t in billing.top_ups)
        # Top-ups count from their day on: each term is its amount once time() has reached that day.
        top_ups = " + ".join(f"{_number(t.amount)} * (time() >= bool {_unix(t.date)})" for t in billing.top_ups)
        who = {"tenant": tenant.name, "currency": budget.currency}
        rules.append({"record": PREPAID_SPEND, "labels": dict(who),
                      "expr": f'sum({SPEND}{{tenant="{tenant.name}"}}) and on () (vector(time()) >= {first})'})
        rules.append({"record": BALANCE, "labels": dict(who),
                      "expr": f'({top_ups}) - (sum(sum_over_time({PREPAID_SPEND}{{tenant="{tenant.name}"}}[{BALANCE_RANGE}])) * {slot} or vector(0))'})
        if billing.low_balance_at is not None:
            rules.append(alert(
                "FleetopsPrepaidBalanceLow",
                f'{BALANCE}{{tenant="{tenant.name}"}} < {_number(billing.low_balance_at)}',
                severity="warning",
                labels={"tenant": tenant.name},
                summary=f"{tenant.name}'s prepaid balance is {{{{ $value | humanize }}}} {budget.currency}, "
                        f"under {_number(billing.low_balance_at)}: top up",
                description=f"Tenant {{{{ $labels.tenant }}}}'s top-ups to date, less what its pods have spent on every cluster since "
                            f"the first one, leave {{{{ $value | humanize }}}} {{{{ $labels.currency }}}}, under its low_balance_at of "
                            f"{_number(billing.low_balance_at)}: at zero its statement shows it overdrawn (fleetops statements exits 1).",
            ))
    return rules


def rule_groups(cluster: spec.Cluster, env: spec.Environment) -> list[dict[str, Any]]:
    groups = []
    if cluster.pools or cluster.edge_groups:
        groups.append({"name": "fleetops.metering", "interval": METERING_INTERVAL, "rules": metering_rules(cluster, env)})
    if cluster.name == env.clusters[0].name:
        groups.append({"name": "fleetops.budget", "interval": f"{BUDGET_MINUTES}m", "rules": budget_rules(env)})
    return groups


def metering(target: Target, cluster: spec.Cluster, env: spec.Environment) -> Part:
    groups = rule_groups(cluster, env)

    def objects() -> Iterator[dict[str, Any]]:
        # With the labels the environment's Prometheus selects rules by, as every rule fleetops renders.
        yield prometheus_rule(target, RULE_NAME, env, groups)

    return Part("fleetops:fleet:Metering", target.cluster, target, objects, outputs={"rule_groups": [g["name"] for g in groups]})
