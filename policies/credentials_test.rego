package fleet.credentials_test

import data.fleet.credentials

obj(kind, name, namespace, manifest) := {"cluster": "m", "kind": kind, "namespace": namespace, "name": name, "manifest": manifest}

msgs(decisions) := {d.msg | some d in decisions; d.rule == "credentials.secret_rendered"}

worker := obj("MultiKueueCluster", "w1", "", {"spec": {"clusterSource": {"kubeConfig": {"location": "multikueue-w1", "locationType": "Secret"}}}})

test_a_multikueue_cluster_naming_its_secret_passes if {
	count(credentials.deny) == 0 with input as {"resources": [worker]}
}

test_the_kubeconfig_secret_rendered_is_denied_naming_its_reader if {
	msgs(credentials.deny) == {"m: Secret kueue-system/multikueue-w1 is rendered with data (the kubeconfig MultiKueueCluster w1 reads): secret material must never be in Git; the operator creates it"} with input as {"resources": [
		worker,
		obj("Secret", "multikueue-w1", "kueue-system", {"data": {"kubeconfig": "YXBpVmVyc2lvbjogdjE="}}),
	]}
}

test_any_secret_with_string_data_is_denied if {
	msgs(credentials.deny) == {"m: Secret t/token is rendered with stringData: secret material must never be in Git; the operator creates it"} with input as {"resources": [obj("Secret", "token", "t", {"stringData": {"token": "x"}})]}
}

test_an_empty_secret_names_nothing_secret if {
	count(credentials.deny) == 0 with input as {"resources": [obj("Secret", "token", "t", {"type": "Opaque"})]}
}
