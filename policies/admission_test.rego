package fleet.admission_test

import data.fleet.admission

webhook(kind) := {"cluster": "c", "kind": kind, "namespace": "", "name": "w", "manifest": {"webhooks": []}}

test_no_webhook_no_decision if {
	count(admission.deny) == 0 with input as {"resources": [{"cluster": "c", "kind": "ValidatingAdmissionPolicy", "namespace": "", "name": "p", "manifest": {}}]}
}

test_every_webhook_configuration_is_denied if {
	decisions := admission.deny with input as {"resources": [webhook("ValidatingWebhookConfiguration"), webhook("MutatingWebhookConfiguration")]}
	{d.msg | some d in decisions; d.rule == "admission.webhook"} == {
		"c: ValidatingWebhookConfiguration w would send objects to a webhook fleetops does not render",
		"c: MutatingWebhookConfiguration w would send objects to a webhook fleetops does not render",
	}
}
