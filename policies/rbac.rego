# METADATA
# title: RBAC
# description: The roles and bindings the program renders grant bounded permissions to named subjects; whatever program wrote them, no wildcard, no escalation verb, no binding to a role that cannot be judged, no binding for everyone, and the permissions that hand out power over the cluster only in the system roles fleetops ships.
package fleet.rbac

cfg := data.fleet_data.rbac

role_kinds := ["Role", "ClusterRole"]

binding_kinds := ["RoleBinding", "ClusterRoleBinding"]

roles := [r | some kind in role_kinds; some r in data.fleet.lib.of_kind(kind)]

bindings := [r | some kind in binding_kinds; some r in data.fleet.lib.of_kind(kind)]

# "cluster/kind/namespace/name" of a role, as a binding's roleRef names it (a ClusterRole has no namespace).
role_key(cluster, kind, namespace, name) := sprintf("%s/%s/%s/%s", [cluster, kind, namespace, name])

ref(r) := {"cluster": r.cluster, "kind": r.kind, "namespace": r.namespace, "name": r.name}

# What makes a role unbounded, one line per finding.
unbounded contains {"role": ref(r), "what": sprintf("rule %d grants %s %s", [i + 1, field, value])} if {
	some r in roles
	some i, rule in r.manifest.rules
	contains(json.marshal(rule), "*") # a rule with no `*` anywhere has none in a field: one test per rule, as few have any
	some field in ["verbs", "resources", "apiGroups", "nonResourceURLs", "resourceNames"]
	some value in object.get(rule, field, [])
	contains(value, "*")
}

unbounded contains {"role": ref(r), "what": sprintf("rule %d grants the verb %s", [i + 1, verb])} if {
	some r in roles
	some i, rule in r.manifest.rules
	some verb in rule.verbs
	verb in cfg.escalation_verbs
}

# A role that aggregates others takes whatever rules any ClusterRole with the label gets later.
unbounded contains {"role": ref(r), "what": "it aggregates other ClusterRoles"} if {
	some r in roles
	r.manifest.aggregationRule
}

unbounded_roles := {role_key(u.role.cluster, u.role.kind, u.role.namespace, u.role.name) | some u in unbounded}

# METADATA
# title: Roles grant no wildcard and no escalation verb
# description: No Role or ClusterRole grants `*` (or a pattern) in verbs, resources, API groups, URLs or names, the verbs bind, escalate or impersonate (rbac.escalation_verbs), or aggregates other ClusterRoles; such a role grants more than anyone can review.
# custom:
#   severity: critical
#   control_id: FLEET-RBAC-01
#   fix: "list the API groups, resources and verbs the role needs, as modules/reconciler.py derives the reconciler's"
deny contains d if {
	some u in unbounded
	r := u.role
	d := {
		"rule": "rbac.unbounded_role",
		"severity": "critical",
		"msg": sprintf("%s: %s %s: %s", [r.cluster, r.kind, name_of(r), u.what]),
		"resource": r,
	}
}

name_of(r) := r.name if r.namespace == ""

name_of(r) := sprintf("%s/%s", [r.namespace, r.name]) if r.namespace != ""

# "cluster/kind/namespace/name" of every role rendered.
rendered_roles := {role_key(r.cluster, r.kind, r.namespace, r.name) | some r in roles}

bound_role(b) := role_key(b.cluster, "ClusterRole", "", b.manifest.roleRef.name) if b.manifest.roleRef.kind == "ClusterRole"

bound_role(b) := role_key(b.cluster, "Role", b.namespace, b.manifest.roleRef.name) if b.manifest.roleRef.kind == "Role"

# METADATA
# title: Bindings name a bounded role rendered with them
# description: A RoleBinding or ClusterRoleBinding binds a role rendered in the same cluster (and namespace, for a Role) whose rules pass FLEET-RBAC-01; a built-in or pre-existing role such as cluster-admin, admin or edit grants what no rule here can see.
# custom:
#   severity: critical
#   control_id: FLEET-RBAC-02
#   fix: "render the role with the rules the subject needs and bind that role, never cluster-admin or another role fleetops does not render"
deny contains d if {
	some b in bindings
	not bound_role(b) in rendered_roles
	d := {
		"rule": "rbac.unjudged_binding",
		"severity": "critical",
		"msg": sprintf("%s: %s %s binds %s %s, which is not rendered with it: what it grants cannot be judged", [b.cluster, b.kind, name_of(b), object.get(b.manifest.roleRef, "kind", "?"), object.get(b.manifest.roleRef, "name", "?")]),
		"resource": ref(b),
	}
}

deny contains d if {
	some b in bindings
	bound_role(b) in unbounded_roles
	d := {
		"rule": "rbac.unjudged_binding",
		"severity": "critical",
		"msg": sprintf("%s: %s %s binds %s %s, which grants wildcards or escalation verbs", [b.cluster, b.kind, name_of(b), b.manifest.roleRef.kind, b.manifest.roleRef.name]),
		"resource": ref(b),
	}
}

broad(subject) if {
	subject.kind == "Group"
	subject.name in cfg.broad_groups
}

broad(subject) if {
	subject.kind == "Group"
	some prefix in cfg.broad_group_prefixes
	startswith(subject.name, prefix)
}

broad(subject) if {
	subject.kind == "User"
	subject.name in cfg.broad_users
}

# METADATA
# title: No binding for everyone
# description: No binding names system:authenticated, system:unauthenticated, system:anonymous, system:serviceaccounts or every service account of a namespace (rbac.broad_groups, rbac.broad_group_prefixes, rbac.broad_users); bind the one ServiceAccount that needs the role.
# custom:
#   severity: critical
#   control_id: FLEET-RBAC-03
#   fix: "bind the ServiceAccount that needs the role, by name and namespace"
deny contains d if {
	some b in bindings
	some subject in object.get(b.manifest, "subjects", [])
	broad(subject)
	d := {
		"rule": "rbac.broad_subject",
		"severity": "critical",
		"msg": sprintf("%s: %s %s binds %s %s to %s %s, which is everyone of that kind", [b.cluster, b.kind, name_of(b), b.manifest.roleRef.kind, b.manifest.roleRef.name, subject.kind, subject.name]),
		"resource": ref(b),
	}
}

# apiGroup -> resource -> the sensitive permissions that name both: a rule is looked up by what it
# names instead of being compared with every permission.
sensitive_index := {group: by_resource |
	some group in {g | some p in cfg.sensitive; some g in p.apiGroups}
	by_resource := {resource: names |
		some p in cfg.sensitive
		group in p.apiGroups
		some resource in p.resources
		names := {name | some name, q in cfg.sensitive; group in q.apiGroups; resource in q.resources}
	}
}

# The sensitive permissions a rule grants: one of their API groups, resources and verbs each.
granted(rule) := {name |
	some group in object.get(rule, "apiGroups", [])
	some resource in object.get(rule, "resources", [])
	some name in sensitive_index[group][resource]
	some verb in object.get(rule, "verbs", [])
	verb in cfg.sensitive[name].verbs
}

# Each role rule that grants sensitive permissions, with their names: judged once for both rules below.
sensitive_rules := [{"role": r, "index": i, "names": names} |
	some r in roles
	some i, rule in r.manifest.rules
	names := granted(rule)
	count(names) > 0
]

may(r, name) if {
	some entry in cfg.system_roles
	data.fleet.lib.system_component(r, entry)
	name in entry.may
}

# METADATA
# title: Power over the cluster only in the system roles
# description: Writing roles and bindings, approving certificates, writing admission configuration, reading Secrets, the kubelet API and exec into pods (rbac.sensitive) are granted only by the system roles fleetops ships (rbac.system_roles, the reconciler's ClusterRole and what upstream gives each device plugin), each only what it is listed for.
# custom:
#   severity: high
#   control_id: FLEET-RBAC-04
#   fix: "leave the permission out of the role; a system role that needs it is listed under rbac.system_roles in policies/data.yaml, in its own reviewed PR"
deny contains d if {
	some s in sensitive_rules
	r := s.role
	i := s.index
	some name in s.names
	not may(r, name)
	d := {
		"rule": "rbac.sensitive_permission",
		"severity": "high",
		"msg": sprintf("%s: %s %s rule %d grants %s permissions, which only the system roles listed in rbac.system_roles may hold", [r.cluster, r.kind, name_of(r), i + 1, name]),
		"resource": ref(r),
	}
}

# "cluster/kind/namespace/name" of every role that holds a sensitive permission.
powerful_roles contains role_key(r.cluster, r.kind, r.namespace, r.name) if {
	some s in sensitive_rules
	r := s.role
}

powerful_role_names := {key: name |
	some r in roles
	key := role_key(r.cluster, r.kind, r.namespace, r.name)
	key in powerful_roles
	name := r.name
}

# The one subject a system role may be bound to: the ServiceAccount named like the role, in the
# entry's account_namespace (by default the environment's reconciler.namespace).
own_account(b, subject) if {
	subject.kind == "ServiceAccount"
	key := bound_role(b)
	subject.name == powerful_role_names[key]
	some entry in cfg.system_roles
	data.fleet.lib.system_component({"cluster": b.cluster, "kind": b.manifest.roleRef.kind, "namespace": "", "name": subject.name}, entry)
	subject.namespace == object.get(entry, "account_namespace", input.spec.reconciler.namespace)
}

# "cluster/namespace/name" of every ServiceAccount bound to a role holding a sensitive permission:
# whoever runs as it holds the role (fleet.workloads judges who does).
powerful_accounts contains sprintf("%s/%s/%s", [b.cluster, object.get(s, "namespace", b.namespace), s.name]) if {
	some b in bindings
	bound_role(b) in powerful_roles
	some s in object.get(b.manifest, "subjects", [])
	s.kind == "ServiceAccount"
}

# METADATA
# title: System roles are bound only to their own ServiceAccount
# description: A role holding a sensitive permission (rbac.sensitive) is bound only to the ServiceAccount named like it, in its system role entry's account_namespace (the reconciler's namespace by default); a second binding of the reconciler's role to any other subject would hand its power out.
# custom:
#   severity: critical
#   control_id: FLEET-RBAC-05
#   fix: "bind a role of its own, with only the permissions the subject needs"
deny contains d if {
	some b in bindings
	bound_role(b) in powerful_roles
	some subject in object.get(b.manifest, "subjects", [])
	not own_account(b, subject)
	d := {
		"rule": "rbac.system_role_binding",
		"severity": "critical",
		"msg": sprintf("%s: %s %s binds %s %s, which holds sensitive permissions, to %s %s/%s: only its own ServiceAccount may hold it", [b.cluster, b.kind, name_of(b), b.manifest.roleRef.kind, b.manifest.roleRef.name, subject.kind, object.get(subject, "namespace", b.namespace), subject.name]),
		"resource": ref(b),
	}
}
