# METADATA
# title: Admission and API extension
# description: fleetops renders no admission webhook, API service or conversion webhook, and one kind of mutating admission policy only (an edge group's disconnect tolerations); anything else added by the program would be sent, or could rewrite, the objects the API server admits or serves, outside any policy here.
package fleet.admission

# What each kind does with the objects the API server handles.
hooks := {
	"ValidatingWebhookConfiguration": "would send objects to a webhook",
	"MutatingWebhookConfiguration": "would send objects to a webhook that may rewrite them",
	"MutatingAdmissionPolicy": "would rewrite objects on admission",
	"MutatingAdmissionPolicyBinding": "would apply a policy that rewrites objects on admission",
	"APIService": "would hand an API group to a server",
}

# METADATA
# title: No admission webhooks, mutating policies or API services
# description: No ValidatingWebhookConfiguration, MutatingWebhookConfiguration, MutatingAdmissionPolicy (or its binding), APIService or CustomResourceDefinition with a conversion webhook is rendered; each reads or rewrites every object it matches, Secrets included, outside any policy here. fleetops admits tenants with a ValidatingAdmissionPolicy (CEL, in the API server) instead. The one exception is an edge group's disconnect policy (modules/edge_group.py), named for an edge group of its cluster, matching only pods being created, and patching nothing but their tolerations.
# custom:
#   severity: critical
#   control_id: FLEET-ADM-01
#   fix: "remove the object; express a tenant check as a ValidatingAdmissionPolicy as modules/tenant.py does"
deny contains d if {
	some kind, what in hooks
	some r in data.fleet.lib.of_kind(kind)
	not edge_disconnect(r)
	d := {
		"rule": "admission.webhook",
		"severity": "critical",
		"msg": sprintf("%s: %s %s, which fleetops does not render, %s", [r.cluster, r.kind, r.name, what]),
		"resource": {"cluster": r.cluster, "kind": r.kind, "name": r.name},
	}
}

deny contains d if {
	some r in data.fleet.lib.of_kind("CustomResourceDefinition")
	r.manifest.spec.conversion.strategy == "Webhook"
	d := {
		"rule": "admission.webhook",
		"severity": "critical",
		"msg": sprintf("%s: CustomResourceDefinition %s, which fleetops does not render, would send its objects to a conversion webhook", [r.cluster, r.name]),
		"resource": {"cluster": r.cluster, "kind": r.kind, "name": r.name},
	}
}

# An edge group's disconnect policy, as modules/edge_group.py renders it: named for an edge group of
# its cluster, it matches pod creation only and its JSON patches write /spec/tolerations and nothing else.
disconnect_prefix := "fleetops-edge-disconnect-"

edge_disconnect(r) if {
	r.kind == "MutatingAdmissionPolicy"
	own_group(r)
	r.manifest.spec.matchConstraints == {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}
	not r.manifest.spec.paramKind
	count(r.manifest.spec.mutations) > 0
	every m in r.manifest.spec.mutations {
		m.patchType == "JSONPatch"
		m.jsonPatch.expression in tolerations_patches
	}
}

# The JSON patch expressions of the MutatingAdmissionPolicies that write /spec/tolerations and nothing
# else: each distinct text matched once (every edge group's policy has the same one). A comprehension,
# not a partial rule, which OPA would evaluate again at each membership test.
tolerations_patches := {expression |
	some expression in {m.jsonPatch.expression | some r in data.fleet.lib.of_kind("MutatingAdmissionPolicy"); some m in r.manifest.spec.mutations}
	paths := regex.find_n(`path\s*:\s*[^,}]*`, expression, -1)
	count(paths) > 0
	every p in paths {
		regex.match(`^path\s*:\s*'/spec/tolerations'\s*$`, p)
	}
}

edge_disconnect(r) if {
	r.kind == "MutatingAdmissionPolicyBinding"
	own_group(r)
	r.manifest.spec == {"policyName": r.name}
}

own_group(r) if {
	startswith(r.name, disconnect_prefix)
	group := input.facts.groups[trim_prefix(r.name, disconnect_prefix)]
	group.kind == "edge_group"
	group.cluster == r.cluster
}
