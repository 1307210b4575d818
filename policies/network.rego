# METADATA
# title: Tenant network isolation
# description: Tenant namespaces deny by default, never open egress to the whole internet, and edge namespaces reach only allow-listed center endpoints.
package fleet.network

# Arrays of the resources each rule reads, filtered once: sets of whole manifests would hash them.
tenant_namespaces := [r |
	some r in data.fleet.lib.of_kind("Namespace")
	r.manifest.metadata.labels["fleetops.io/tenant"]
]

network_policies := data.fleet.lib.of_kind("NetworkPolicy")

# A policy that selects every pod for both directions and allows nothing.
denies_all(np) if {
	np.manifest.spec.podSelector == {}
	"Ingress" in np.manifest.spec.policyTypes
	"Egress" in np.manifest.spec.policyTypes
	count(object.get(np.manifest.spec, "ingress", [])) == 0
	count(object.get(np.manifest.spec, "egress", [])) == 0
}

# "cluster/namespace" of every namespace that has a deny-all policy.
default_denied contains sprintf("%s/%s", [np.cluster, np.namespace]) if {
	some np in network_policies
	denies_all(np)
}

# METADATA
# title: Default deny in every tenant namespace
# description: Each tenant namespace has a NetworkPolicy selecting all pods that denies ingress and egress; allow lists are added on top.
# custom:
#   severity: high
#   control_id: FLEET-NET-01
#   fix: "keep the default-deny NetworkPolicy the tenant component renders (check modules/tenant.py)"
deny contains d if {
	some ns in tenant_namespaces
	not sprintf("%s/%s", [ns.cluster, ns.name]) in default_denied
	d := {
		"rule": "network.missing_default_deny",
		"severity": "high",
		"msg": sprintf("%s: tenant namespace %s has no default-deny NetworkPolicy for ingress and egress", [ns.cluster, ns.name]),
		"resource": {"cluster": ns.cluster, "tenant": ns.name, "kind": "Namespace", "name": ns.name},
	}
}

# One entry per IP block an egress rule allows, with the policy it belongs to and the rule's ports.
egress_blocks contains {"np": {"cluster": np.cluster, "namespace": np.namespace, "name": np.name}, "cidr": peer.ipBlock.cidr, "ports": object.get(rule, "ports", [])} if {
	some np in network_policies
	some rule in object.get(np.manifest.spec, "egress", [])
	some peer in object.get(rule, "to", [])
	peer.ipBlock.cidr
}

anywhere := {"0.0.0.0/0", "::/0"}

# METADATA
# title: No egress to anywhere
# description: No NetworkPolicy opens egress to 0.0.0.0/0 or ::/0; egress goes to declared CIDRs and endpoints.
# custom:
#   severity: high
#   control_id: FLEET-NET-02
#   fix: "name endpoints in network.center_endpoints and allow them by name instead of 0.0.0.0/0"
deny contains d if {
	some block in egress_blocks
	block.cidr in anywhere
	np := block.np
	d := {
		"rule": "network.egress_anywhere",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicy %s/%s allows egress to %s", [np.cluster, np.namespace, np.name, block.cidr]),
		"resource": {"cluster": np.cluster, "tenant": np.namespace, "kind": "NetworkPolicy", "namespace": np.namespace, "name": np.name},
	}
}

edge_clusters contains c.name if {
	some c in input.spec.clusters
	c.role == "edge"
}

endpoint_ports := {e.cidr: ports |
	some e in input.spec.network.center_endpoints
	ports := {p | some p in e.ports}
}

# An egress rule reaches an allow-listed endpoint: its CIDR, and only that endpoint's ports.
allow_listed(cidr, ports) if {
	allowed := endpoint_ports[cidr]
	count(ports) > 0
	every p in ports {
		p.port in allowed
	}
}

# METADATA
# title: Edge namespaces reach only center endpoints
# description: On edge clusters, every egress IP block of a tenant namespace is an allow-listed center endpoint with its declared ports; edge sites have no general egress.
# custom:
#   severity: high
#   control_id: FLEET-NET-03
#   fix: "allow only endpoints named in network.center_endpoints from edge tenants"
deny contains d if {
	some block in egress_blocks
	np := block.np
	np.cluster in edge_clusters
	not allow_listed(block.cidr, block.ports)
	d := {
		"rule": "network.edge_egress_not_allowed",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicy %s/%s allows egress to %s, which is not an allow-listed center endpoint and port", [np.cluster, np.namespace, np.name, block.cidr]),
		"resource": {"cluster": np.cluster, "tenant": np.namespace, "kind": "NetworkPolicy", "namespace": np.namespace, "name": np.name},
	}
}
