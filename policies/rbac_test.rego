package fleet.rbac_test

import data.fleet.rbac

cluster_role(name, rules) := {"cluster": "c", "kind": "ClusterRole", "namespace": "", "name": name, "manifest": {"rules": rules}}

role(ns, name, rules) := {"cluster": "c", "kind": "Role", "namespace": ns, "name": name, "manifest": {"rules": rules}}

binding(kind, ns, name, ref_kind, ref_name, subjects) := {"cluster": "c", "kind": kind, "namespace": ns, "name": name, "manifest": {
	"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref_name},
	"subjects": subjects,
}}

sa(name) := {"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}

reader := [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]

base := {
	"spec": {"tenants": [{"name": "t", "clusters": ["c"]}], "reconciler": {"namespace": "fleetops-system"}},
	"facts": {"groups": {"npu": {"cluster": "c", "sharing": "exclusive"}}},
	"resources": [
		cluster_role("plugin", reader),
		binding("ClusterRoleBinding", "", "plugin", "ClusterRole", "plugin", [sa("plugin")]),
		role("t", "app", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
		binding("RoleBinding", "t", "app", "Role", "app", [{"kind": "ServiceAccount", "name": "app", "namespace": "t"}]),
		# A RoleBinding may bind a ClusterRole within its namespace.
		binding("RoleBinding", "t", "read-nodes", "ClusterRole", "plugin", [{"kind": "ServiceAccount", "name": "app", "namespace": "t"}]),
		cluster_role("fleetops-reconciler", [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create", "patch"]}]),
		cluster_role("ascend-device-plugin-npu", [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]),
		binding("ClusterRoleBinding", "", "fleetops-reconciler", "ClusterRole", "fleetops-reconciler", [{"kind": "ServiceAccount", "name": "fleetops-reconciler", "namespace": "fleetops-system"}]),
		binding("ClusterRoleBinding", "", "ascend-device-plugin-npu", "ClusterRole", "ascend-device-plugin-npu", [sa("ascend-device-plugin-npu")]),
	],
}

with_resources(extra) := object.union(base, {"resources": array.concat(base.resources, extra)})

rules(decisions) := {d.rule | some d in decisions}

msgs(decisions, rule) := {d.msg | some d in decisions; d.rule == rule}

test_bounded_roles_bound_to_named_subjects_pass if {
	count(rbac.deny) == 0 with input as base
}

test_wildcards_and_escalation_verbs_are_unbounded if {
	wide := cluster_role("wide", [
		{"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]},
		{"apiGroups": [""], "resources": ["nodes"], "verbs": ["escalate"], "resourceNames": ["n*"]},
		{"nonResourceURLs": ["/metrics/*"], "verbs": ["get"]},
	])
	msgs(rbac.deny, "rbac.unbounded_role") == {
		"c: ClusterRole wide: rule 1 grants apiGroups *",
		"c: ClusterRole wide: rule 2 grants the verb escalate",
		"c: ClusterRole wide: rule 2 grants resourceNames n*",
		"c: ClusterRole wide: rule 3 grants nonResourceURLs /metrics/*",
	} with input as with_resources([wide])
}

test_an_aggregating_role_is_unbounded if {
	aggregate := object.union(cluster_role("agg", []), {"manifest": {"aggregationRule": {"clusterRoleSelectors": [{}]}}})
	msgs(rbac.deny, "rbac.unbounded_role") == {"c: ClusterRole agg: it aggregates other ClusterRoles"} with input as with_resources([aggregate])
}

test_a_namespaced_role_is_named_with_its_namespace if {
	msgs(rbac.deny, "rbac.unbounded_role") == {"c: Role t/imp: rule 1 grants the verb impersonate"} with input as with_resources([role("t", "imp", [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}])])
}

test_a_binding_to_a_role_not_rendered_is_unjudged if {
	admin := binding("ClusterRoleBinding", "", "admin", "ClusterRole", "cluster-admin", [sa("x")])
	msgs(rbac.deny, "rbac.unjudged_binding") == {"c: ClusterRoleBinding admin binds ClusterRole cluster-admin, which is not rendered with it: what it grants cannot be judged"} with input as with_resources([admin])
	# A Role is looked up in the binding's own namespace.
	elsewhere := binding("RoleBinding", "other", "app", "Role", "app", [sa("x")])
	msgs(rbac.deny, "rbac.unjudged_binding") == {"c: RoleBinding other/app binds Role app, which is not rendered with it: what it grants cannot be judged"} with input as with_resources([elsewhere])
}

test_a_binding_to_an_unbounded_role_is_unjudged if {
	wide := role("t", "wide", [{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}])
	bound := binding("RoleBinding", "t", "wide", "Role", "wide", [sa("x")])
	msgs(rbac.deny, "rbac.unjudged_binding") == {"c: RoleBinding t/wide binds Role wide, which grants wildcards or escalation verbs"} with input as with_resources([wide, bound])
}

test_bindings_for_everyone_are_denied if {
	everyone := binding("ClusterRoleBinding", "", "everyone", "ClusterRole", "plugin", [
		{"kind": "Group", "name": "system:authenticated"},
		{"kind": "Group", "name": "system:serviceaccounts:t"},
		{"kind": "User", "name": "system:anonymous"},
		{"kind": "Group", "name": "plugin-admins"},
	])
	msgs(rbac.deny, "rbac.broad_subject") == {
		"c: ClusterRoleBinding everyone binds ClusterRole plugin to Group system:authenticated, which is everyone of that kind",
		"c: ClusterRoleBinding everyone binds ClusterRole plugin to Group system:serviceaccounts:t, which is everyone of that kind",
		"c: ClusterRoleBinding everyone binds ClusterRole plugin to User system:anonymous, which is everyone of that kind",
	} with input as with_resources([everyone])
}

test_sensitive_permissions_only_in_the_system_roles if {
	secrets := cluster_role("reader", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["watch"]}])
	msgs(rbac.deny, "rbac.sensitive_permission") == {"c: ClusterRole reader rule 1 grants secrets permissions, which only the system roles listed in rbac.system_roles may hold"} with input as with_resources([secrets])
}

test_writing_workloads_is_sensitive if {
	writer := role("t", "deployer", [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}])
	msgs(rbac.deny, "rbac.sensitive_permission") == {"c: Role t/deployer rule 1 grants workloads permissions, which only the system roles listed in rbac.system_roles may hold"} with input as with_resources([writer])
}

test_a_system_role_holds_only_what_it_is_listed_for if {
	more := cluster_role("ascend-device-plugin-npu", [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}])
	replaced := object.union(base, {"resources": array.concat([r | some r in base.resources; r.name != "ascend-device-plugin-npu"], [more])})
	msgs(rbac.deny, "rbac.sensitive_permission") == {"c: ClusterRole ascend-device-plugin-npu rule 1 grants exec permissions, which only the system roles listed in rbac.system_roles may hold"} with input as replaced
}

test_a_system_role_name_for_a_group_that_does_not_exist_is_not_trusted if {
	fake := cluster_role("ascend-device-plugin-ghost", [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}])
	"rbac.sensitive_permission" in rules(rbac.deny) with input as with_resources([fake])
}

test_a_system_role_bound_to_another_subject_is_denied if {
	lent := binding("RoleBinding", "t", "borrow", "ClusterRole", "fleetops-reconciler", [
		{"kind": "ServiceAccount", "name": "app"},
		{"kind": "ServiceAccount", "name": "fleetops-reconciler", "namespace": "t"},
		{"kind": "User", "name": "alice"},
	])
	msgs(rbac.deny, "rbac.system_role_binding") == {
		"c: RoleBinding t/borrow binds ClusterRole fleetops-reconciler, which holds sensitive permissions, to ServiceAccount t/app: only its own ServiceAccount may hold it",
		"c: RoleBinding t/borrow binds ClusterRole fleetops-reconciler, which holds sensitive permissions, to ServiceAccount t/fleetops-reconciler: only its own ServiceAccount may hold it",
		"c: RoleBinding t/borrow binds ClusterRole fleetops-reconciler, which holds sensitive permissions, to User t/alice: only its own ServiceAccount may hold it",
	} with input as with_resources([lent])
}

test_the_reconcilers_account_follows_its_namespace if {
	moved := object.union(base, {"spec": {"reconciler": {"namespace": "ops"}}})
	"rbac.system_role_binding" in rules(rbac.deny) with input as moved
}

test_powerful_accounts_are_those_bound_to_sensitive_roles if {
	rbac.powerful_accounts == {"c/fleetops-system/fleetops-reconciler", "c/kube-system/ascend-device-plugin-npu"} with input as base
}
