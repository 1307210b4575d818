package fleet.lib_test

resources := [
	{"cluster": "a", "kind": "Namespace", "name": "x", "namespace": ""},
	{"cluster": "a", "kind": "ConfigMap", "name": "y", "namespace": "x"},
	{"cluster": "b", "kind": "Namespace", "name": "z", "namespace": ""},
]

names(rs) := [r.name | some r in rs]

test_of_kind_filters_an_input_without_index if {
	names(data.fleet.lib.of_kind("Namespace")) == ["x", "z"] with input as {"resources": resources}
}

test_of_kind_reads_the_index if {
	# An index that disagrees with the kinds shows which of the two was read.
	names(data.fleet.lib.of_kind("Namespace")) == ["y"] with input as {"resources": resources, "by_kind": {"Namespace": [1]}}
}

test_a_kind_absent_from_the_index_has_no_objects if {
	data.fleet.lib.of_kind("Secret") == [] with input as {"resources": resources, "by_kind": {"Namespace": [0, 2]}}
}

test_an_index_that_is_no_object_is_not_read if {
	names(data.fleet.lib.of_kind("Namespace")) == ["x", "z"] with input as {"resources": resources, "by_kind": null}
}

spec := {"tenants": [{"name": "t", "clusters": ["a", "b"]}]}

groups := {"gpu": {"cluster": "a", "sharing": "mig"}}

component(kind, namespace, name) := {"cluster": "a", "kind": kind, "namespace": namespace, "name": name}

test_tenant_namespaces_come_from_the_environment_file_and_the_tenant_label if {
	data.fleet.lib.tenant_namespaces == {"a/t", "b/t"} with input as {"spec": spec, "resources": []}
	labelled := {"cluster": "a", "kind": "Namespace", "name": "x", "namespace": "", "manifest": {"metadata": {"labels": {"fleetops.io/tenant": "x"}}}}
	plain := {"cluster": "a", "kind": "Namespace", "name": "y", "namespace": "", "manifest": {"metadata": {}}}
	data.fleet.lib.tenant_namespaces == {"a/t", "b/t", "a/x"} with input as {"spec": spec, "resources": [labelled, plain]}
}

test_a_system_component_by_name if {
	data.fleet.lib.system_component(component("ClusterRole", "", "r"), {"kind": "ClusterRole", "namespace": "", "name": "r"}) with input as {"spec": spec}
	not data.fleet.lib.system_component(component("Role", "", "r"), {"kind": "ClusterRole", "namespace": "", "name": "r"}) with input as {"spec": spec}
}

test_a_system_component_by_group if {
	entry := {"kind": "DaemonSet", "namespace": "kube-system", "group_prefix": "p-", "sharing": "mig"}
	data.fleet.lib.system_component(component("DaemonSet", "kube-system", "p-gpu"), entry) with input as {"spec": spec, "facts": {"groups": groups}}
	not data.fleet.lib.system_component(component("DaemonSet", "kube-system", "p-gpu"), object.union(entry, {"sharing": "exclusive"})) with input as {"spec": spec, "facts": {"groups": groups}}
	not data.fleet.lib.system_component(component("DaemonSet", "kube-system", "p-cpu"), entry) with input as {"spec": spec, "facts": {"groups": groups}}
}

test_never_in_a_tenant_namespace if {
	not data.fleet.lib.system_component(component("DaemonSet", "t", "r"), {"kind": "DaemonSet", "namespace": "t", "name": "r"}) with input as {"spec": spec}
}
