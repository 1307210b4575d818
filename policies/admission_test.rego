package fleet.admission_test

import data.fleet.admission

obj(kind, manifest) := {"cluster": "c", "kind": kind, "namespace": "", "name": "w", "manifest": manifest}

msgs(decisions) := {d.msg | some d in decisions; d.rule == "admission.webhook"}

test_validating_policies_and_plain_crds_pass if {
	count(admission.deny) == 0 with input as {"resources": [
		obj("ValidatingAdmissionPolicy", {}),
		obj("CustomResourceDefinition", {"spec": {"conversion": {"strategy": "None"}}}),
		obj("CustomResourceDefinition", {"spec": {}}),
	]}
}

test_every_webhook_and_rewriting_kind_is_denied if {
	resources := [obj(kind, {}) | some kind, _ in admission.hooks]
	msgs(admission.deny) == {
		"c: ValidatingWebhookConfiguration w, which fleetops does not render, would send objects to a webhook",
		"c: MutatingWebhookConfiguration w, which fleetops does not render, would send objects to a webhook that may rewrite them",
		"c: MutatingAdmissionPolicy w, which fleetops does not render, would rewrite objects on admission",
		"c: MutatingAdmissionPolicyBinding w, which fleetops does not render, would apply a policy that rewrites objects on admission",
		"c: APIService w, which fleetops does not render, would hand an API group to a server",
	} with input as {"resources": resources}
}

test_a_conversion_webhook_is_denied if {
	msgs(admission.deny) == {"c: CustomResourceDefinition w, which fleetops does not render, would send its objects to a conversion webhook"} with input as {"resources": [obj("CustomResourceDefinition", {"spec": {"conversion": {"strategy": "Webhook"}}})]}
}

disconnect_policy(expression) := {"spec": {
	"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
	"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
}}

tolerations_patch := "[JSONPatch{op: 'add', path: '/spec/tolerations', value: variables.kept}]"

edge_input(resources) := {"facts": {"groups": {"g": {"cluster": "c", "kind": "edge_group"}, "p": {"cluster": "c", "kind": "pool"}}}, "resources": resources}

named(kind, name, manifest) := {"cluster": "c", "kind": kind, "namespace": "", "name": name, "manifest": manifest}

test_an_edge_groups_disconnect_policy_passes if {
	count(admission.deny) == 0 with input as edge_input([
		named("MutatingAdmissionPolicy", "fleetops-edge-disconnect-g", disconnect_policy(tolerations_patch)),
		named("MutatingAdmissionPolicyBinding", "fleetops-edge-disconnect-g", {"spec": {"policyName": "fleetops-edge-disconnect-g"}}),
	])
}

test_a_disconnect_policy_that_patches_more_than_tolerations_is_denied if {
	both := "[JSONPatch{op: 'add', path: '/spec/tolerations', value: []}, JSONPatch{op: 'add', path: '/spec/nodeName', value: 'x'}]"
	msgs(admission.deny) == {"c: MutatingAdmissionPolicy fleetops-edge-disconnect-g, which fleetops does not render, would rewrite objects on admission"} with input as edge_input([
		named("MutatingAdmissionPolicy", "fleetops-edge-disconnect-g", disconnect_policy(both)),
	])
}

test_a_disconnect_policy_beyond_pod_creation_or_of_no_edge_group_is_denied if {
	wide := {"spec": {
		"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
		"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": tolerations_patch}}],
	}}
	msgs(admission.deny) == {
		"c: MutatingAdmissionPolicy fleetops-edge-disconnect-g, which fleetops does not render, would rewrite objects on admission",
		"c: MutatingAdmissionPolicy fleetops-edge-disconnect-p, which fleetops does not render, would rewrite objects on admission",
		"c: MutatingAdmissionPolicyBinding fleetops-edge-disconnect-g, which fleetops does not render, would apply a policy that rewrites objects on admission",
	} with input as edge_input([
		named("MutatingAdmissionPolicy", "fleetops-edge-disconnect-g", wide),
		named("MutatingAdmissionPolicy", "fleetops-edge-disconnect-p", disconnect_policy(tolerations_patch)),
		named("MutatingAdmissionPolicyBinding", "fleetops-edge-disconnect-g", {"spec": {"policyName": "other"}}),
	])
}
