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
