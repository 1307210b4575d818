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
