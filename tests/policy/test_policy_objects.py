"""Object-level policies: what the program renders is judged, whatever program wrote it.

Each attack is an object appended to dev's rendered objects (as a head that edits `modules/` would
render it) and evaluated through the policy input fleetops builds; the bundled environments keep
passing. The egress rule is arithmetic: a union of CIDRs is measured, not compared as text.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

import pytest

from fleetops import policy
from fleetops.envelope import DecisionStatus
from tests import servers
from tests.policy.test_policy import TODAY, rendered

RBAC = "rbac.authorization.k8s.io/v1"


def judge(*extra: dict[str, Any], cluster: str = "dev-center", engine: policy.Engine | None = None) -> policy.Verdict:
    env, state = rendered("dev")
    entries = [policy.resource_entry(c, m) for c, m in state.objects()]
    entries += [policy.resource_entry(cluster, m) for m in extra]
    return policy.evaluate_input(policy.build_input(env, entries, state.revision), engine=engine, today=TODAY)


def denied(verdict: policy.Verdict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in verdict.of(DecisionStatus.DENY):
        out.setdefault(d.rule, []).append(d.msg)
    return out


def meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": meta(name), "rules": rules}


def cluster_role_binding(name: str, role: str, subjects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects}


def service_account(name: str, namespace: str) -> dict[str, Any]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def network_policy(namespace: str, spec: dict[str, Any], name: str = "opened") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(name, namespace),
            "spec": {"podSelector": {}, **spec}}


def egress_to(namespace: str, *cidrs: str, name: str = "opened") -> dict[str, Any]:
    return network_policy(namespace, {"policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": c}} for c in cidrs]}]}, name)


def pod(name: str, namespace: str, spec: dict[str, Any], image: str = "busybox:1.37") -> dict[str, Any]:
    container = {"name": "main", "image": image}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, namespace), "spec": {"containers": [container], **spec}}


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_the_objects_fleetops_renders_pass_the_object_rules(name):
    env, state = rendered(name)
    verdict = policy.evaluate(env, state, today=TODAY)
    new = {"rbac", "workloads", "admission"}
    assert not [d.msg for d in verdict.decisions if d.rule.split(".")[0] in new or d.rule == "network.tenant_opened"]


# --- RBAC --------------------------------------------------------------------------------------------


def test_cluster_admin_for_every_authenticated_caller_is_denied():
    binding = cluster_role_binding("everyone-admin", "cluster-admin", [{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}])
    rules = denied(judge(binding))
    assert rules["rbac.unjudged_binding"] == [
        "dev-center: ClusterRoleBinding everyone-admin binds ClusterRole cluster-admin, which is not rendered with it: what it grants cannot be judged"
    ]
    assert rules["rbac.broad_subject"] == [
        "dev-center: ClusterRoleBinding everyone-admin binds ClusterRole cluster-admin to Group system:authenticated, which is everyone of that kind"
    ]


@pytest.mark.parametrize("subject", [
    {"kind": "Group", "name": "system:unauthenticated"},
    {"kind": "Group", "name": "system:serviceaccounts"},
    {"kind": "Group", "name": "system:serviceaccounts:ml-sandbox"},
    {"kind": "User", "name": "system:anonymous"},
])
def test_a_binding_for_everyone_is_denied_even_to_a_harmless_role(subject):
    role = cluster_role("reader", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}])
    rules = denied(judge(role, cluster_role_binding("reader", "reader", [subject])))
    assert set(rules) == {"rbac.broad_subject"}


@pytest.mark.parametrize("rule, finding", [
    ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}, "rule 1 grants apiGroups *"),
    ({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}, "rule 1 grants resources *"),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "rule 1 grants verbs *"),
    ({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]}, "rule 1 grants resources pods/*"),
    ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]}, "rule 1 grants the verb bind"),
    ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]}, "rule 1 grants the verb escalate"),
    ({"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}, "rule 1 grants the verb impersonate"),
])
def test_a_role_with_a_wildcard_or_escalation_verb_is_denied_and_so_is_its_binding(rule, finding):
    role = cluster_role("wide", [rule])
    rules = denied(judge(role, cluster_role_binding("wide", "wide", [service_account("app", "ml-sandbox")])))
    assert f"dev-center: ClusterRole wide: {finding}" in rules["rbac.unbounded_role"]
    assert rules["rbac.unjudged_binding"] == ["dev-center: ClusterRoleBinding wide binds ClusterRole wide, which grants wildcards or escalation verbs"]


def test_an_aggregating_cluster_role_is_denied():
    role = {**cluster_role("aggregate", []), "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}
    assert denied(judge(role))["rbac.unbounded_role"] == ["dev-center: ClusterRole aggregate: it aggregates other ClusterRoles"]


def test_a_role_that_reads_secrets_or_writes_bindings_is_denied_outside_the_system_roles():
    role = cluster_role("sneaky", [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]},
    ])
    assert sorted(denied(judge(role))["rbac.sensitive_permission"]) == [
        "dev-center: ClusterRole sneaky rule 1 grants secrets permissions, which only the system roles listed in rbac.system_roles may hold",
        "dev-center: ClusterRole sneaky rule 2 grants rbac permissions, which only the system roles listed in rbac.system_roles may hold",
    ]


def test_a_role_that_writes_workloads_is_denied_outside_the_system_roles():
    # Writing a DaemonSet runs any image, as any ServiceAccount of its namespace, on every node.
    role = cluster_role("deployer", [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["create", "patch"]}])
    assert denied(judge(role)) == {"rbac.sensitive_permission": [
        "dev-center: ClusterRole deployer rule 1 grants workloads permissions, which only the system roles listed in rbac.system_roles may hold"
    ]}


def _reconciler_role(cluster: str = "dev-center") -> dict[str, Any]:
    env, state = rendered("dev")
    return copy.deepcopy(next(m for c, m in state.objects() if c == cluster and m["kind"] == "ClusterRole" and m["metadata"]["name"] == "fleetops-reconciler"))


def test_the_reconcilers_cluster_role_passes_but_a_wildcard_in_it_is_still_denied():
    role = _reconciler_role()
    # It is trusted for what it is listed for, not for anything: the allow list bounds it.
    assert any(r["resources"] == ["clusterrolebindings", "clusterroles", "rolebindings", "roles"] for r in role["rules"])
    role["rules"].append({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
    env, state = rendered("dev")
    entries = [policy.resource_entry(c, role if (c, m["kind"], m["metadata"]["name"]) == ("dev-center", "ClusterRole", "fleetops-reconciler") else m)
               for c, m in state.objects()]
    rules = denied(policy.evaluate_input(policy.build_input(env, entries, state.revision), today=TODAY))
    assert f"dev-center: ClusterRole fleetops-reconciler: rule {len(role['rules'])} grants verbs *" in rules["rbac.unbounded_role"]
    # ...and its binding, now to an unbounded role
    assert any("fleetops-reconciler binds ClusterRole fleetops-reconciler" in m for m in rules["rbac.unjudged_binding"])


def test_the_reconcilers_role_bound_to_a_tenant_account_is_denied():
    # A bounded, rendered role: only who holds it is wrong.
    lent = cluster_role_binding("lend", "fleetops-reconciler", [service_account("app", "ml-sandbox")])
    assert denied(judge(lent)) == {"rbac.system_role_binding": [
        "dev-center: ClusterRoleBinding lend binds ClusterRole fleetops-reconciler, which holds sensitive permissions, "
        "to ServiceAccount ml-sandbox/app: only its own ServiceAccount may hold it"
    ]}


def test_a_workload_that_borrows_the_reconcilers_account_is_denied():
    miner = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("miner", "fleetops-system"), "spec": {"template": {"spec": {
        "serviceAccountName": "fleetops-reconciler", "containers": [{"name": "m", "image": "evil.example/miner:1"}]}}}}
    assert denied(judge(miner)) == {"workloads.borrowed_service_account": [
        "dev-center: Deployment fleetops-system/miner runs as ServiceAccount fleetops-reconciler, which is bound to a role holding sensitive permissions: only its own workload may"
    ]}


def test_a_role_named_like_a_system_role_in_the_wrong_place_is_not_trusted():
    # A namespaced Role with the reconciler's name, and a ClusterRole named after a group that does not exist.
    role = {"apiVersion": RBAC, "kind": "Role", "metadata": meta("fleetops-reconciler", "ml-sandbox"),
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    fake = cluster_role("ascend-device-plugin-nowhere", [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}])
    assert len(denied(judge(role, fake))["rbac.sensitive_permission"]) == 2


# --- workloads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, use", [
    ({"container": {"securityContext": {"privileged": True}}}, "privileged"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath /"),
    ({"hostNetwork": True}, "hostNetwork"),
    ({"hostPID": True}, "hostPID"),
    ({"hostIPC": True}, "hostIPC"),
    ({"container": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}}, "capability NET_ADMIN"),
    ({"container": {"ports": [{"containerPort": 22, "hostPort": 22}]}}, "hostPort 22"),
    ({"securityContext": {"windowsOptions": {"hostProcess": True}}}, "hostProcess"),
])
def test_host_privileges_in_a_tenant_pod_are_denied(spec, use):
    assert denied(judge(pod("escape", "ml-sandbox", spec)))["workloads.host_privilege"] == [
        f"dev-center: Pod ml-sandbox/escape uses {use}, which only a system component listed in workloads.system_components may, with its own images"
    ]


def test_a_host_folder_handed_out_through_a_persistent_volume_is_denied():
    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta("root"),
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/"}}}
    assert denied(judge(volume)) == {"workloads.host_volume": ["dev-center: PersistentVolume root hands out the node folder / (hostPath) to any claim"]}


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job", "CronJob"])
def test_every_kind_that_makes_pods_is_judged(kind):
    template = {"spec": {"containers": [{"name": "main", "image": "busybox:1.37", "securityContext": {"privileged": True}}]}}
    spec = {"jobTemplate": {"spec": {"template": template}}, "schedule": "* * * * *"} if kind == "CronJob" else {"template": template}
    obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": meta("escape", "ml-sandbox"), "spec": spec}
    assert [m.split(" uses ")[0] for m in denied(judge(obj))["workloads.host_privilege"]] == [f"dev-center: {kind} ml-sandbox/escape"]


def test_a_tenant_namespace_without_pod_security_enforcement_is_denied():
    # Tenants' own pods are admitted by Pod Security admission: dropping the label lets them run privileged.
    env, state = rendered("dev")
    entries = []
    for c, m in state.objects():
        if m["kind"] == "Namespace" and m["metadata"]["name"] == "ml-sandbox":
            m = copy.deepcopy(m)
            m["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
        entries.append(policy.resource_entry(c, m))
    rules = denied(policy.evaluate_input(policy.build_input(env, entries, state.revision), today=TODAY))
    assert rules == {"workloads.tenant_pod_security": ["dev-center: tenant namespace ml-sandbox enforces Pod Security level privileged, not one of baseline, restricted"]}


def _device_plugin() -> dict[str, Any]:
    env, state = rendered("dev")
    return copy.deepcopy(next(m for c, m in state.objects() if m["kind"] == "DaemonSet" and m["metadata"]["name"] == "nvidia-device-plugin-dev-a100"))


def test_a_device_plugin_may_use_only_what_its_entry_grants_and_only_its_images():
    plugin = _device_plugin()
    # The same DaemonSet with another name: the shipped one also passes, this one is judged on its own.
    plugin["metadata"]["name"] = "nvidia-device-plugin-dev-a100"
    pod_spec = plugin["spec"]["template"]["spec"]
    pod_spec["hostNetwork"] = True
    extra = denied(judge(plugin))["workloads.host_privilege"]
    assert extra == ["dev-center: DaemonSet kube-system/nvidia-device-plugin-dev-a100 uses hostNetwork, which only a system component listed in workloads.system_components may, with its own images"] * 1
    swapped = _device_plugin()
    swapped["spec"]["template"]["spec"]["containers"][1]["image"] = "evil.example/plugin:1"
    assert "uses hostPath /var/lib/kubelet/device-plugins" in denied(judge(swapped))["workloads.host_privilege"][0]


def test_a_privileged_daemonset_named_after_a_pool_that_does_not_exist_is_denied():
    plugin = _device_plugin()
    plugin["metadata"]["name"] = "nvidia-device-plugin-no-such-pool"
    assert denied(judge(plugin))["workloads.host_privilege"]


def test_mig_manager_privileges_are_only_for_mig_pools():
    # dev-a100 time-slices: a mig-manager for it gets nothing of the MIG entry.
    manager = pod("nvidia-mig-manager-dev-a100", "kube-system", {"hostPID": True},
                  image="nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.3-ubuntu20.04")
    manager["kind"] = "Pod"
    assert denied(judge(manager))["workloads.host_privilege"]


# --- admission -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, what", [
    ("ValidatingWebhookConfiguration", "would send objects to a webhook"),
    ("MutatingWebhookConfiguration", "would send objects to a webhook that may rewrite them"),
])
def test_an_admission_webhook_is_denied(kind, what):
    webhook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": meta("everything"),
               "webhooks": [{"name": "x.example.com", "clientConfig": {"url": "https://evil.example/"}, "rules": [
                   {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}],
                   "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}
    assert denied(judge(webhook))["admission.webhook"] == [f"dev-center: {kind} everything, which fleetops does not render, {what}"]


def test_a_mutating_admission_policy_an_api_service_and_a_conversion_webhook_are_denied():
    rewrite = {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy", "metadata": meta("rewrite"), "spec": {}}
    service = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": meta("v1.example.com"),
               "spec": {"group": "example.com", "version": "v1", "service": {"name": "x", "namespace": "ml-sandbox"}}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta("things.example.com"),
           "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://evil.example/"}}}}}
    assert sorted(denied(judge(rewrite, service, crd))["admission.webhook"]) == [
        "dev-center: APIService v1.example.com, which fleetops does not render, would hand an API group to a server",
        "dev-center: CustomResourceDefinition things.example.com, which fleetops does not render, would send its objects to a conversion webhook",
        "dev-center: MutatingAdmissionPolicy rewrite, which fleetops does not render, would rewrite objects on admission",
    ]


# --- tenant NetworkPolicies ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec, what", [
    ({"policyTypes": ["Ingress"], "ingress": [{}]}, "ingress rule 1 allows every source"),
    ({"policyTypes": ["Egress"], "egress": [{"ports": [{"port": 443}]}]}, "egress rule 1 allows every destination"),
    ({"policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {}}]}]}, "ingress rule 1 peer 1 is not in the tenant's allow lists"),
    ({"policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}, "ingress rule 1 peer 1 is not in the tenant's allow lists"),
    ({"policyTypes": ["Ingress"], "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}, "ingress rule 1 peer 1 is not in the tenant's allow lists"),
    ({"policyTypes": ["Egress"], "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {}}]}]}, "egress rule 1 peer 1 is not in the tenant's allow lists"),
    ({"policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.1.2.0/24"}}]}]}, "egress rule 1 peer 1 is not in the tenant's allow lists"),
    ({"policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform-dev"}}}]}]},
     "ingress rule 1 peer 1 is not in the tenant's allow lists"),
])
def test_a_networkpolicy_that_opens_a_tenant_beyond_its_allow_lists_is_denied(spec, what):
    assert denied(judge(network_policy("ml-sandbox", spec)))["network.tenant_opened"] == [f"dev-center: NetworkPolicy ml-sandbox/opened: {what}"]


def test_an_endpoint_on_an_undeclared_port_is_denied_on_the_edge_tenant():
    endpoint = network_policy("edge-dev", {"policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.120.0.0/24"}}], "ports": [{"port": 22, "protocol": "TCP"}]}]})
    assert "network.tenant_opened" in denied(judge(endpoint, cluster="dev-edge"))


def test_an_endpoint_port_range_is_denied():
    # endPort turns the declared port 443 into every port from 443 up.
    ranged = network_policy("edge-dev", {"policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "10.120.0.0/24"}}], "ports": [{"port": 443, "endPort": 65535, "protocol": "TCP"}]}]})
    assert {"network.tenant_opened", "network.edge_egress_not_allowed"} <= set(denied(judge(ranged, cluster="dev-edge")))


def test_a_tenant_namespace_stripped_of_its_label_is_still_a_tenant():
    env, state = rendered("dev")
    entries = []
    for c, m in state.objects():
        if m["kind"] == "NetworkPolicy" and m["metadata"].get("namespace") == "ml-sandbox" and m["metadata"]["name"] == "default-deny":
            continue
        if m["kind"] == "Namespace" and m["metadata"]["name"] == "ml-sandbox":
            m = copy.deepcopy(m)
            del m["metadata"]["labels"]["fleetops.io/tenant"]
        entries.append(policy.resource_entry(c, m))
    rules = denied(policy.evaluate_input(policy.build_input(env, entries, state.revision), today=TODAY))
    assert rules["network.missing_default_deny"] == ["dev-center: tenant namespace ml-sandbox has no default-deny NetworkPolicy for ingress and egress"]


# --- egress by arithmetic ------------------------------------------------------------------------------


@pytest.mark.parametrize("cidrs, union, family", [
    (["0.0.0.0/1", "128.0.0.0/1"], "0.0.0.0/0", "IPv4"),
    (["::/1", "8000::/1"], "::/0", "IPv6"),
    (["0.0.0.0/0"], "0.0.0.0/0", "IPv4"),
    (["10.0.0.0/7"], "10.0.0.0/7", "IPv4"),
    (["2001:db8::/16"], "2001::/16", "IPv6"),
    (["::ffff:0.0.0.0/96"], "0.0.0.0/0", "IPv4"),
    (["::ffff:0.0.0.0/97", "128.0.0.0/1"], "0.0.0.0/0", "IPv4"),
])
def test_egress_covering_more_than_the_allowed_share_is_denied_however_it_is_split(cidrs, union, family):
    assert denied(judge(egress_to("ml-sandbox", *cidrs)))["network.egress_anywhere"] == [
        f"dev-center: NetworkPolicies in namespace ml-sandbox allow egress to {union} together (their union), "
        f"more of the {family} address space than network.max_egress_share allows"
    ]


@pytest.mark.parametrize("cidrs, reached", [
    (["64:ff9b::/96"], "0.0.0.0/0"),                       # NAT64's well-known prefix: every IPv4 host
    (["64:ff9b::/95"], "0.0.0.0/0"),                       # a block around it
    (["64:ff9b::/97", "64:ff9b::8000:0/97"], "0.0.0.0/0"),  # split in halves
    (["64:ff9b:1::/48"], "0.0.0.0/0"),                     # NAT64's local-use prefix
    (["::ffff:0:0:0/96"], "0.0.0.0/0"),                    # SIIT
    (["2001::/32"], "0.0.0.0/0"),                          # Teredo
    (["64:ff9b::8000:0/97", "10.0.0.0/8"], "10.0.0.0/8, 128.0.0.0/1"),  # half through NAT64, a /8 directly
])
def test_egress_reaching_ipv4_through_a_translator_is_measured_as_ipv4(cidrs, reached):
    assert denied(judge(egress_to("ml-sandbox", *cidrs)))["network.egress_translated"] == [
        f"dev-center: NetworkPolicies in namespace ml-sandbox allow egress to {', '.join(c for c in cidrs if ':' in c)}, which reach IPv4 "
        f"through a translator (NAT64, SIIT, 6to4, Teredo): with the namespace's IPv4 blocks, {reached}, more of the IPv4 address space "
        "than network.max_egress_share allows"
    ]


def test_a_translated_block_already_wide_in_ipv6_is_denied_once():
    # 6to4 reaches all of IPv4 only from 2002::/16, far over the IPv6 share: that rule says it.
    rules = denied(judge(egress_to("ml-sandbox", "2002::/16")))
    assert "network.egress_anywhere" in rules and "network.egress_translated" not in rules


def test_a_narrow_block_through_a_translator_reaches_only_its_ipv4_addresses():
    # 64:ff9b::10.0.0.0/104 is 10.0.0.0/8 through NAT64, within the share; the Teredo client address is inverted.
    from fleetops.policy.facts import ipv4_reached

    assert "network.egress_translated" not in denied(judge(egress_to("ml-sandbox", "64:ff9b::a00:0/104", "2002:a00::/24")))
    assert [str(n) for n in ipv4_reached(ipaddress.IPv6Network("2001:0:1:2:0:0:f5ff:fffe/127"))] == ["10.0.0.0/31"]
    assert [str(n) for n in ipv4_reached(ipaddress.IPv6Network("2002:a01:200::/40"))] == ["10.1.2.0/24"]


def test_egress_split_across_policies_is_added_up_per_namespace():
    halves = [egress_to("ml-sandbox", "0.0.0.0/2", name="a"), egress_to("ml-sandbox", "64.0.0.0/2", name="b")]
    (msg,) = denied(judge(*halves))["network.egress_anywhere"]
    assert "allow egress to 0.0.0.0/1 together" in msg


def test_overlapping_egress_is_counted_once():
    # Eight copies of a /9 and blocks inside it are half a /8: within the share. Counted eight times,
    # they would be four /8s.
    copies = ["10.0.0.0/9"] * 4 + ["10.0.0.0/10", "10.64.0.0/10", "10.0.0.0/16", "10.1.0.0/16"]
    verdict = judge(*[egress_to("ml-sandbox", c, name=f"copy-{i}") for i, c in enumerate(copies)])
    assert "network.egress_anywhere" not in denied(verdict)
    document = policy.build_input(*rendered("dev")[:1], [policy.resource_entry("dev-center", egress_to("ml-sandbox", *copies))], "r")
    assert document["facts"]["egress"]["dev-center/ml-sandbox"]["ipv4"] == {"cidrs": ["10.0.0.0/9"], "share": 2**23 / 2**32}


def test_ipv4_and_ipv6_are_measured_apart():
    # A /9 of each family: each is within its family's share, however large the IPv6 number of addresses.
    assert "network.egress_anywhere" not in denied(judge(egress_to("ml-sandbox", "10.0.0.0/9", "2001:db8::/40")))
    assert "IPv6" in denied(judge(egress_to("ml-sandbox", "10.0.0.0/9", "2001:db8::/31")))["network.egress_anywhere"][0]


def test_an_egress_cidr_that_cannot_be_measured_is_denied():
    assert denied(judge(egress_to("ml-sandbox", "everything")))["network.egress_anywhere"] == [
        "dev-center: NetworkPolicies in namespace ml-sandbox allow egress to everything, which is not a CIDR and cannot be measured"
    ]


# --- both engines ---------------------------------------------------------------------------------------

ATTACKS = {
    "rbac": [cluster_role_binding("everyone-admin", "cluster-admin", [{"kind": "Group", "name": "system:authenticated"}]),
             cluster_role("wide", [{"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get", "bind"]}]),
             cluster_role_binding("lend", "fleetops-reconciler", [service_account("app", "ml-sandbox")])],
    "workloads": [pod("escape", "ml-sandbox", {"hostPID": True, "volumes": [{"name": "r", "hostPath": {"path": "/"}}],
                                                "container": {"securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}}}),
                  pod("miner", "fleetops-system", {"serviceAccountName": "fleetops-reconciler", "container": {"ports": [{"containerPort": 1, "hostPort": 8080}]}}),
                  {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta("root"), "spec": {"local": {"path": "/"}}}],
    "admission": [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta("w"), "webhooks": []},
                  {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta("c"), "spec": {"conversion": {"strategy": "Webhook"}}}],
    "network": [egress_to("ml-sandbox", "0.0.0.0/1", "128.0.0.0/1", "::/1", "8000::/1"), egress_to("platform-dev", "not-a-cidr", "::ffff:0.0.0.0/96"),
                network_policy("ml-sandbox", {"ingress": [{}, {"from": [{"namespaceSelector": {}}]}]}, name="wide-open")],
}


@pytest.mark.real
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_opa_decides_the_object_rules_as_the_embedded_engine_does(opa: servers.Opa, attack: str):
    embedded = judge(*ATTACKS[attack])
    real = judge(*ATTACKS[attack], engine=policy.OpaEngine(opa.url, token=opa.token, timeout=30))
    assert real.engine == "opa" and not real.ok
    assert [(d.status, d.rule, d.msg) for d in real.decisions] == [(d.status, d.rule, d.msg) for d in embedded.decisions]
