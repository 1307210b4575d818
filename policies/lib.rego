# METADATA
# title: Shared helpers
# description: Functions the fleet policies share; no decisions of its own.
package fleet.lib

# The rendered objects of one kind, by their full name (`data.fleet.lib.of_kind`: regorus 0.9 finds
# no function through an import). fleetops indexes input.resources by kind (input.by_kind) because
# regorus takes ~1 µs per object to filter them, and several rules each need one kind of 15,000
# objects. An input without the index (one written by hand, as in the tests) is filtered instead.
of_kind(kind) := objects if {
	indexed
	objects := [input.resources[i] | some i in object.get(input.by_kind, kind, [])]
}

of_kind(kind) := objects if {
	not indexed
	objects := [r | some r in input.resources; r.kind == kind]
}

indexed if is_object(input.by_kind)
