# METADATA
# title: Admission webhooks
# description: fleetops renders no admission webhook; one added by the program would be sent, and could rewrite or refuse, every object the API server admits.
package fleet.admission

webhook_kinds := ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]

# METADATA
# title: No admission webhooks
# description: No ValidatingWebhookConfiguration or MutatingWebhookConfiguration is rendered; a webhook reads (and a mutating one rewrites) every object it matches, Secrets included, outside any policy here. fleetops admits tenants with ValidatingAdmissionPolicy (CEL, in the API server) instead.
# custom:
#   severity: critical
#   control_id: FLEET-ADM-01
#   fix: "remove the webhook configuration; express the check as a ValidatingAdmissionPolicy as modules/tenant.py does"
deny contains d if {
	some kind in webhook_kinds
	some r in data.fleet.lib.of_kind(kind)
	d := {
		"rule": "admission.webhook",
		"severity": "critical",
		"msg": sprintf("%s: %s %s would send objects to a webhook fleetops does not render", [r.cluster, r.kind, r.name]),
		"resource": {"cluster": r.cluster, "kind": r.kind, "name": r.name},
	}
}
