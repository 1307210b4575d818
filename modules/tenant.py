"""A tenant on one cluster: namespace, quotas, default-deny network and its scheduler queue.

Quota semantics (per cluster): `guaranteed` is what the tenant always gets (the nominalQuota of its
preempting Kueue ClusterQueue, in the pool that holds it: spec.guarantee_placement); `burst` is the most
it may hold by borrowing idle capacity (guaranteed + the borrowingLimit of its Kueue Cohort, and the
namespace ResourceQuota hard limit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetops import kube, spec
from fleetops.spec import NON_PREEMPTING, bundles, non_preempting_classes, preemptible_classes, queue_names
from modules.kube import Part, Target, cel_list, merged, quantity_name


def split(total: int, weights: list[int]) -> list[int]:
    """Split `total` in proportion to `weights`, by largest remainder, so the parts sum to `total`."""
    whole = sum(weights)
    if whole == 0:
        return [0] * len(weights)
    raw = [total * w / whole for w in weights]
    parts = [int(r) for r in raw]
    order = sorted(range(len(weights)), key=lambda i: (-(raw[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def namespace_manifest(target: Target, tenant: spec.Tenant) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": target.metadata(
            tenant.name,
            labels={
                kube.TENANT_LABEL: tenant.name,
                kube.ISOLATION_LABEL: tenant.isolation,
                "pod-security.kubernetes.io/enforce": "baseline",
            },
        ),
    }


def quota_manifests(target: Target, tenant: spec.Tenant) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": target.metadata(f"device-{quantity_name(resource)}", tenant.name, labels={kube.DEVICE_RESOURCE_LABEL: quantity_name(resource)}),
            "spec": {"hard": {f"requests.{resource}": str(quota.burst)}},
        }
        for resource, quota in sorted(tenant.quota.items())
    ]


def limit_range_manifest(target: Target, tenant: spec.Tenant) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": target.metadata("defaults", tenant.name),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                    "default": {"cpu": "2", "memory": "8Gi"},
                }
            ]
        },
    }


def network_manifests(target: Target, tenant: spec.Tenant, env: spec.Environment) -> list[dict[str, Any]]:
    """The tenant's NetworkPolicies: default deny, then one allow per declaration, each rendered from the
    environment's flows (spec.reach) into and out of this tenant on this cluster: a tenant another lets
    in (allow_from_tenants) has its egress opened toward it as the other's ingress is opened to it."""
    def policy(name: str, types: list[str], ingress: list[spec.Flow] = (), egress: list[spec.Flow] = ()) -> dict[str, Any]:
        body: dict[str, Any] = {"policyTypes": types}
        if ingress:
            body["ingress"] = [merged(ingress, True)]
        if egress:
            body["egress"] = [merged(egress, False)]
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": target.metadata(name, tenant.name),
            "spec": {"podSelector": {}, **body},
        }

    reach = spec.reach(env)
    me = spec.End(spec.Kind.TENANT, tenant.name)
    ingress, egress = reach.ingress(target.cluster, me), reach.egress(target.cluster, me)

    def of(flows: tuple[spec.Flow, ...], reason: spec.Reason) -> list[spec.Flow]:
        return [f for f in flows if f.reason is reason]

    out = []
    if env.network.default_deny:
        out.append(policy("default-deny", ["Ingress", "Egress"]))
    if dns := of(egress, spec.Reason.DNS):
        out.append(policy("allow-dns", ["Egress"], egress=dns))
    same = of(egress, spec.Reason.SAME)
    out.append(policy("allow-same-namespace", ["Ingress", "Egress"], ingress=same, egress=same))
    if sources := of(ingress, spec.Reason.TENANT):
        out.append(policy("allow-from-tenants", ["Ingress"], ingress=sources))
    if destinations := of(egress, spec.Reason.TENANT):
        out.append(policy("allow-to-tenants", ["Egress"], egress=destinations))
    if blocks := of(egress, spec.Reason.CIDR):
        out.append(policy("allow-egress-cidrs", ["Egress"], egress=blocks))
    for flow in of(egress, spec.Reason.ENDPOINT):
        out.append(policy(f"allow-endpoint-{flow.destination.name}", ["Egress"], egress=[flow]))
    return out


Amounts = Callable[[int, int, int], dict[str, int]]  # (guaranteed, burst - guaranteed, lendable) -> quota fields


def resource_groups(tenant: spec.Tenant, groups: list[spec.Group], placement: spec.Placement, lend_fraction: float,
                    amounts: Amounts) -> list[dict[str, Any]]:
    """Kueue resourceGroups for the tenant's device quotas, each flavor's numbers given by `amounts`:
    the guarantee where `placement` holds it, what it may borrow beyond spread by what it can borrow on
    each pool (spec.Placement.borrowable), so that every unit of the allowance can be used."""
    out = []
    for resources, flavors in bundles(sorted(tenant.quota), groups):
        quotas: dict[str, list[dict[str, int]]] = {}
        for resource in resources:
            quota = tenant.quota[resource]
            weights = [placement.borrowable(tenant.name, resource, f, lend_fraction) for f in flavors]
            held = placement.held.get((tenant.name, resource), {})
            nominal = [held.get(f, 0) for f in flavors]
            borrow = split(quota.burst - quota.guaranteed, weights)
            quotas[resource] = [amounts(n, b, spec.lent(n, lend_fraction)) for n, b in zip(nominal, borrow)]
        out.append(
            {
                "coveredResources": resources,
                "flavors": [
                    {"name": flavor, "resources": [{"name": r, **quotas[r][i]} for r in resources]}
                    for i, flavor in enumerate(flavors)
                ],
            }
        )
    return out


NEVER_PREEMPTS = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}


def default_class(env: spec.Environment) -> spec.PriorityClass | None:
    """The class of a workload that names none: the global default, the lowest if several (as Kueue picks)."""
    defaults = [pc for pc in env.priority_classes if pc.global_default]
    return min(defaults, key=lambda pc: pc.value) if defaults else None


def spot_validation(tenant: spec.Tenant, env: spec.Environment, pools: list[str]) -> dict[str, str]:
    """Only work of a class that accepts preemption may tolerate the spot taint: a class declared
    `preemptible: true`, or one the tenant accepts preemption for itself (its `preemptible_classes`);
    the policy is the tenant's own, so another tenant's work of that class is still refused.

    Spot pools are kept to that work by the taint rather than by a ClusterQueue of their own: Kueue
    admits a Workload to a flavor only when its pods tolerate the flavor's nodeTaints, and the
    scheduler places a pod on a node under the same rule, so a pod that cannot tolerate the taint
    reaches a spot node neither through Kueue nor around it (a Deployment's pods are not Kueue's).
    The tenant keeps one quota over all its pools; only which pods may tolerate is decided here.
    A toleration with no key tolerates every taint, the spot one included.
    """
    key = kube.SPOT_TAINT["key"]
    tolerates = f"variables.podSpec.tolerations.exists(t, !has(t.key) || t.key == '' || t.key == '{key}')"
    accepted = preemptible_classes(tenant, env)
    return {
        "expression": f"variables.priorityClass in {cel_list(accepted)} || !has(variables.podSpec.tolerations) || !({tolerates})",
        "messageExpression": (f"'priority class ' + variables.priorityClass + ' is not preemptible: only work of {', '.join(accepted) or 'none'} "
                              f"may tolerate the taint {key} of the spot pools of tenant {tenant.name} ({', '.join(pools)})'"),
        "reason": "Forbidden",
    }


def kueue_manifests(target: Target, tenant: spec.Tenant, groups: list[spec.Group], env: spec.Environment) -> list[dict[str, Any]]:
    """The tenant's quota as Kueue holds it: a Cohort of its own in the cluster's, and its ClusterQueues.

    Kueue decides preemption per ClusterQueue, never per priority class (a WorkloadPriorityClass has no
    preemption policy, and a PriorityClass's is not read). A class declared `preemption: Never` can
    only be kept from evicting through a ClusterQueue that never preempts, so its workloads go to a
    second queue (the tenant's admission policy sends them there). Both share the tenant's quota
    through the tenant's Cohort: the preempting queue holds the guarantee (nominalQuota) and so
    reclaims it from anyone borrowing it, its own non-preempting queue included; the other borrows
    from it and from the cluster; the Cohort bounds what the tenant borrows (burst) and lends.
    """
    scheduler = env.scheduler
    placement = spec.guarantee_placement(env, spec.cluster_by_name(env, target.cluster))
    cohort_name = f"{target.cluster}.{tenant.name}"
    labels = {kube.TENANT_LABEL: tenant.name}
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": target.metadata(cohort_name, labels=labels),
        "spec": {
            "parentName": target.cluster,
            "resourceGroups": resource_groups(tenant, groups, placement, scheduler.lend_fraction,
                                              lambda n, b, lend: {"nominalQuota": 0, "borrowingLimit": b, "lendingLimit": lend}),
        },
    }

    def cluster_queue(name: str, amounts: Amounts, preemption: dict[str, Any]) -> dict[str, Any]:
        return cluster_queue_manifest(target, tenant, name, cohort_name, {
            # Kueue stops at the first flavor a job fits in, borrowing if it must: told to look on,
            # it takes the pool that holds the tenant's guarantee before borrowing elsewhere; and
            # where that pool's guarantee is lent out, it reclaims it there rather than borrowing on
            # another pool (Kueue's default), where its work could in turn be reclaimed.
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor", "preference": "PreemptionOverBorrowing"},
            "resourceGroups": resource_groups(tenant, groups, placement, scheduler.lend_fraction, amounts),
            "preemption": preemption,
        })

    preempting, never = queue_names(tenant)
    out = [
        cohort,
        cluster_queue(tenant.name, lambda n, b, lend: {"nominalQuota": n}, {
            "reclaimWithinCohort": scheduler.reclaim_within_cohort,
            "withinClusterQueue": scheduler.within_cluster_queue,
        }),
        local_queue_manifest(target, tenant, preempting, tenant.name),
    ]
    if non_preempting_classes(tenant, env):
        name = f"{tenant.name}-{NON_PREEMPTING}"
        out += [cluster_queue(name, lambda n, b, lend: {"nominalQuota": 0}, NEVER_PREEMPTS), local_queue_manifest(target, tenant, never, name)]
    return out


def cluster_queue_manifest(target: Target, tenant: spec.Tenant, name: str, cohort: str, body: dict[str, Any]) -> dict[str, Any]:
    """A ClusterQueue of the tenant's, in `cohort`, for its namespace only; `body` is the rest of its spec."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": target.metadata(name, labels={kube.TENANT_LABEL: tenant.name}),
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant.name}},
            "queueingStrategy": "BestEffortFIFO",
            **body,
        },
    }


def local_queue_manifest(target: Target, tenant: spec.Tenant, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": target.metadata(name, tenant.name),
        "spec": {"clusterQueue": cluster_queue},
    }


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def offline_queues(tenant: spec.Tenant, cluster: spec.Cluster) -> dict[str, list[str]]:
    """The offline LocalQueues of the cluster's edge groups open to the tenant, with the classes each takes."""
    return {spec.offline_queue_name(g): sorted(g.offline_work.priority_classes) for g in cluster.edge_groups
            if g.offline_work is not None and tenant.name in g.offline_work.tenants}


def admission_manifests(target: Target, tenant: spec.Tenant, env: spec.Environment) -> list[dict[str, Any]]:
    """What the API server itself enforces in the tenant's namespace, for every workload submitted
    (kubectl, a pipeline, an operator), not only what fleetops renders: a ValidatingAdmissionPolicy
    (CEL) bound to the namespace, and a ResourceQuota that admits no pod of another priority class."""
    allowed = sorted(tenant.priority_classes)
    jobs, pods = "request.resource.resource == 'jobs'", "request.resource.resource == 'pods'"
    validations = []
    if allowed:
        listed = cel_list(allowed)
        shown = ", ".join(allowed)
        validations += [
            {"expression": f"!({jobs}) || !has(object.spec.template.spec.priorityClassName) || object.spec.template.spec.priorityClassName in {listed}",
             "messageExpression": f"'priority class ' + object.spec.template.spec.priorityClassName + ' is not allowed for tenant {tenant.name} (allowed: {shown})'",
             "reason": "Forbidden"},
            {"expression": f"!({pods}) || !has(object.spec.priorityClassName) || object.spec.priorityClassName in {listed}",
             "messageExpression": f"'priority class ' + object.spec.priorityClassName + ' is not allowed for tenant {tenant.name} (allowed: {shown})'",
             "reason": "Forbidden"},
            {"expression": f"!has(object.metadata.labels) || !('{KUEUE_PRIORITY_LABEL}' in object.metadata.labels) || object.metadata.labels['{KUEUE_PRIORITY_LABEL}'] in {listed}",
             "message": f"workload priority class is not allowed for tenant {tenant.name} (allowed: {shown})",
             "reason": "Forbidden"},
        ]
        fallback = default_class(env)
        if fallback is not None and fallback.name not in allowed:
            # A Job naming no class gets the default from Kueue (and its pods from Kubernetes): one the
            # tenant may not use would be queued, and preempt, as such before its pods were refused.
            named = f"has(object.metadata.labels) && '{KUEUE_PRIORITY_LABEL}' in object.metadata.labels"
            validations.append({
                "expression": f"!({jobs}) || ({named}) || has(object.spec.template.spec.priorityClassName)",
                "message": f"name a priority class: the default, {fallback.name}, is not allowed for tenant {tenant.name} (allowed: {shown})",
                "reason": "Forbidden"})
    variables = []
    cluster = spec.cluster_by_name(env, target.cluster)
    spot = [g.name for g in spec.eligible_groups(tenant, [cluster]) if spec.is_spot(g)]
    non_preempting = non_preempting_classes(tenant, env)
    offline = offline_queues(tenant, cluster)
    if spot or non_preempting or offline:
        # The class Kueue gives the workload: its WorkloadPriorityClass label, else its pods' class,
        # else the global default (kueue's jobframework.ExtractPriority).
        fallback = default_class(env)
        variables += [
            {"name": "podSpec", "expression": f"{jobs} ? object.spec.template.spec : object.spec"},
            {"name": "priorityClass", "expression":
                f"has(object.metadata.labels) && '{KUEUE_PRIORITY_LABEL}' in object.metadata.labels ? object.metadata.labels['{KUEUE_PRIORITY_LABEL}']"
                f" : has(variables.podSpec.priorityClassName) ? variables.podSpec.priorityClassName : '{fallback.name if fallback else ''}'"},
        ]
    if spot:
        validations.append(spot_validation(tenant, env, spot))
    # Jobs and bare pods must name the tenant's LocalQueue for their class (kueue_manifests); pods a
    # controller owns (a Job's) are admitted through it.
    preempting, never = queue_names(tenant)
    if non_preempting:
        variables.append({"name": "queue", "expression": f"variables.priorityClass in {cel_list(non_preempting)} ? '{never}' : '{preempting}'"})
    else:
        variables.append({"name": "queue", "expression": f"'{preempting}'"})
    label = f"object.metadata.labels['{QUEUE_LABEL}']"
    # An edge group's offline queue takes the classes it lists, and only those (edge_group.offline_work).
    queues = " || ".join([f"{label} == variables.queue",
                          *(f"({label} == '{q}' && variables.priorityClass in {cel_list(classes)})" for q, classes in offline.items())])
    in_queue = f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels && ({queues})"
    owned = "has(object.metadata.ownerReferences) && size(object.metadata.ownerReferences) > 0"
    also = "".join(f", or {q} for offline work of {', '.join(classes)}" for q, classes in offline.items())
    validations.append({
        "expression": f"!({jobs} || ({pods} && !({owned}))) || ({in_queue})",
        "messageExpression": f"'workloads of tenant {tenant.name} go through its queue: set the label {QUEUE_LABEL}: ' + variables.queue + '{also}'",
        "reason": "Forbidden",
    })
    name = f"fleetops-tenant-{tenant.name}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": target.metadata(name, labels={kube.TENANT_LABEL: tenant.name}),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]},
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
            ]},
            "variables": variables,
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": target.metadata(name, labels={kube.TENANT_LABEL: tenant.name}),
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant.name}}},
        },
    }
    out = [policy, binding]
    if allowed:
        # Kubernetes' own way to keep priority classes to their users ("limit priority class
        # consumption"): no pod of any other class fits a quota of zero pods.
        out.append({
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": target.metadata("priority-classes", tenant.name),
            "spec": {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": allowed}]}},
        })
    return out


def tenant_part(target: Target, tenant: spec.Tenant, env: spec.Environment) -> Part:
    groups = spec.eligible_groups(tenant, [spec.cluster_by_name(env, target.cluster)])

    def objects() -> list[dict[str, Any]]:
        out = [
            namespace_manifest(target, tenant),
            *quota_manifests(target, tenant),
            limit_range_manifest(target, tenant),
            *network_manifests(target, tenant, env),
        ]
        return out + kueue_manifests(target, tenant, groups, env) + admission_manifests(target, tenant, env)

    return Part("fleetops:fleet:Tenant", f"{target.cluster}/{tenant.name}", target, objects,
                outputs={"namespace": tenant.name, "pools": [g.name for g in groups]})
