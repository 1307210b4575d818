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

# "cluster/namespace" of every tenant namespace: those the environment file declares, whatever the
# rendered objects say (a program that drops the tenant label must not drop a rule), and any rendered
# namespace labelled as a tenant's.
tenant_namespaces contains sprintf("%s/%s", [cluster, tenant.name]) if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
}

tenant_namespaces contains sprintf("%s/%s", [r.cluster, r.name]) if {
	some r in of_kind("Namespace")
	r.manifest.metadata.labels["fleetops.io/tenant"]
}

# A rendered object is the system component `entry` of policies/data.yaml names: same kind and
# namespace, and its name, or `group_prefix` + a pool or edge group of the object's cluster (with the
# entry's `sharing` mode, when it names one). Never one in a tenant namespace.
system_component(r, entry) if {
	r.name == entry.name # the cheapest test first: most entries differ here
	same_place(r, entry)
}

system_component(r, entry) if {
	startswith(r.name, entry.group_prefix) # the cheapest test first: most entries differ here
	same_place(r, entry)
	group := input.facts.groups[trim_prefix(r.name, entry.group_prefix)]
	group.cluster == r.cluster
	object.get(entry, "sharing", group.sharing) == group.sharing
}

same_place(r, entry) if {
	r.kind == entry.kind
	r.namespace == entry.namespace
	not sprintf("%s/%s", [r.cluster, r.namespace]) in tenant_namespaces
}
