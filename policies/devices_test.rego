package fleet.devices_test

import data.fleet.devices

plugin(group) := {
	"cluster": "c1",
	"kind": "DaemonSet",
	"namespace": "kube-system",
	"name": sprintf("nvidia-device-plugin-%s", [group]),
	"manifest": {"spec": {"template": {"spec": {"nodeSelector": {"fleetops.io/pool": group}}}}},
}

sliced(replicas) := {
	"cluster": "c1",
	"kind": "ConfigMap",
	"namespace": "kube-system",
	"name": "nvidia-device-plugin-shared",
	"manifest": {
		"metadata": {"labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
		"data": {"shared": sprintf("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: %d\n", [replicas])},
	},
}

test_time_slicing_in_a_configmap_of_another_app_is_not_judged if {
	other := object.union(sliced(8), {"manifest": {"metadata": {"labels": {"app.kubernetes.io/name": "something-else"}}}})
	not "devices.time_slicing_replicas" in rules(devices.deny) with input as object.union(base, {"resources": [plugin("shared"), plugin("mig"), other]})
}

mig_pool(model, profiles) := {"name": "mig", "device": {"model": model}, "sharing": {"mode": "mig", "mig": {"profiles": profiles}}}

base := {
	"facts": {
		"groups": {
			"shared": {"cluster": "c1", "kind": "pool", "resource": "nvidia.com/gpu", "sharing": "time-slicing"},
			"mig": {"cluster": "c1", "kind": "pool", "resource": "nvidia.com/gpu", "sharing": "mig"},
		},
		"eligible": {"secure": {"c1": ["mig"]}},
	},
	"resources": [plugin("shared"), plugin("mig"), sliced(4)],
	"spec": {
		"clusters": [{"name": "c1", "pools": [mig_pool("A100-SXM4-40GB", {"3g.20gb": 1, "2g.10gb": 2})]}],
		"tenants": [{"name": "secure", "isolation": "strict"}],
	},
}

rules(decisions) := {d.rule | some d in decisions}

test_clean_input_has_no_decisions if {
	count(devices.deny) == 0 with input as base
}

test_missing_plugin_fires if {
	decisions := devices.deny with input as object.union(base, {"resources": [plugin("shared"), sliced(4)]})
	some d in decisions
	d.rule == "devices.missing_plugin"
	d.resource.name == "mig"
}

test_time_slicing_replicas_fires if {
	"devices.time_slicing_replicas" in rules(devices.deny) with input as object.union(base, {"resources": [plugin("shared"), plugin("mig"), sliced(8)]})
}

test_strict_on_time_slicing_fires if {
	exposed := object.union(base, {"facts": {"eligible": {"secure": {"c1": ["mig", "shared"]}}}})
	decisions := devices.deny with input as exposed
	some d in decisions
	d.rule == "devices.strict_on_time_slicing"
	d.resource.name == "shared"
}
