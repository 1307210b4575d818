# METADATA
# title: Admission and API extension
# description: fleetops renders no admission webhook, mutating admission policy, API service or conversion webhook; one added by the program would be sent, or could rewrite, the objects the API server admits or serves, outside any policy here.
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
# description: No ValidatingWebhookConfiguration, MutatingWebhookConfiguration, MutatingAdmissionPolicy (or its binding), APIService or CustomResourceDefinition with a conversion webhook is rendered; each reads or rewrites every object it matches, Secrets included, outside any policy here. fleetops admits tenants with a ValidatingAdmissionPolicy (CEL, in the API server) instead.
# custom:
#   severity: critical
#   control_id: FLEET-ADM-01
#   fix: "remove the object; express a tenant check as a ValidatingAdmissionPolicy as modules/tenant.py does"
deny contains d if {
	some kind, what in hooks
	some r in data.fleet.lib.of_kind(kind)
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
