# METADATA
# title: Tenant network isolation
# description: Tenant namespaces deny by default, never open egress to the whole internet, and edge namespaces reach only allow-listed center endpoints.
package fleet.network

cfg := data.fleet_data.network

tenants := {tenant.name: tenant | some tenant in input.spec.tenants}

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
	some namespace in data.fleet.lib.tenant_namespaces
	not namespace in default_denied
	parts := split(namespace, "/")
	cluster := parts[0]
	name := parts[1]
	d := {
		"rule": "network.missing_default_deny",
		"severity": "high",
		"msg": sprintf("%s: tenant namespace %s has no default-deny NetworkPolicy for ingress and egress", [cluster, name]),
		"resource": {"cluster": cluster, "tenant": name, "kind": "Namespace", "name": name},
	}
}

family_names := {"ipv4": "IPv4", "ipv6": "IPv6"}

# METADATA
# title: Egress reaches a bounded share of the address space
# description: Per namespace, the union of every egress IP block of its NetworkPolicies (facts.egress, computed by arithmetic, overlaps counted once) covers at most network.max_egress_share of the IPv4 and of the IPv6 address space; 0.0.0.0/0 is denied and so is 0.0.0.0/1 with 128.0.0.0/1. A CIDR that cannot be measured is denied.
# custom:
#   severity: high
#   control_id: FLEET-NET-02
#   fix: "name endpoints in network.center_endpoints and allow them by name, or narrow the tenant's egress_cidrs"
deny contains d if {
	some fact in input.facts.egress
	some family, _ in family_names
	fact[family].share > cfg.max_egress_share[family]
	d := {
		"rule": "network.egress_anywhere",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicies in namespace %s allow egress to %s together (their union), more of the %s address space than network.max_egress_share allows", [fact.cluster, fact.namespace, concat(", ", fact[family].cidrs), family_names[family]]),
		"resource": {"cluster": fact.cluster, "tenant": fact.namespace, "kind": "Namespace", "name": fact.namespace},
	}
}

deny contains d if {
	some fact in input.facts.egress
	count(fact.invalid) > 0
	d := {
		"rule": "network.egress_anywhere",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicies in namespace %s allow egress to %s, which is not a CIDR and cannot be measured", [fact.cluster, fact.namespace, concat(", ", fact.invalid)]),
		"resource": {"cluster": fact.cluster, "tenant": fact.namespace, "kind": "Namespace", "name": fact.namespace},
	}
}

# METADATA
# title: Egress reaches a bounded share of IPv4 through translators too
# description: IPv6 blocks that embed IPv4 addresses (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, SIIT, IPv4-compatible, 6to4, Teredo; facts.egress translated) reach the IPv4 hosts a translator or relay delivers to. With the namespace's IPv4 blocks they cover at most network.max_egress_share of the IPv4 address space. Reported here when neither family's own measure already denies the namespace.
# custom:
#   severity: high
#   control_id: FLEET-NET-05
#   fix: "name endpoints in network.center_endpoints and allow them by name, or narrow the tenant's egress_cidrs"
deny contains d if {
	some fact in input.facts.egress
	fact.translated.share > cfg.max_egress_share.ipv4
	not fact.ipv4.share > cfg.max_egress_share.ipv4
	not fact.ipv6.share > cfg.max_egress_share.ipv6
	d := {
		"rule": "network.egress_translated",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicies in namespace %s allow egress to %s, which reach IPv4 through a translator (NAT64, SIIT, 6to4, Teredo): with the namespace's IPv4 blocks, %s, more of the IPv4 address space than network.max_egress_share allows", [fact.cluster, fact.namespace, concat(", ", fact.translated.through), concat(", ", fact.translated.cidrs)]),
		"resource": {"cluster": fact.cluster, "tenant": fact.namespace, "kind": "Namespace", "name": fact.namespace},
	}
}

# One entry per IP block an egress rule on an edge cluster allows, with the policy it belongs to and the rule's ports.
edge_egress_blocks contains {"np": {"cluster": np.cluster, "namespace": np.namespace, "name": np.name}, "cidr": peer.ipBlock.cidr, "ports": object.get(rule, "ports", [])} if {
	some np in network_policies
	np.cluster in edge_clusters
	some rule in np.manifest.spec.egress
	some peer in rule.to
	peer.ipBlock.cidr
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
	on_ports(ports, endpoint_ports[cidr])
}

# Every port of a rule is one of `allowed`, one port each: a rule without ports allows them all, and
# endPort opens a range.
on_ports(ports, allowed) if {
	count(ports) > 0
	every p in ports {
		p.port in allowed
		not p.endPort
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
	some block in edge_egress_blocks
	np := block.np
	not allow_listed(block.cidr, block.ports)
	d := {
		"rule": "network.edge_egress_not_allowed",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicy %s/%s allows egress to %s, which is not an allow-listed center endpoint and port", [np.cluster, np.namespace, np.name, block.cidr]),
		"resource": {"cluster": np.cluster, "tenant": np.namespace, "kind": "NetworkPolicy", "namespace": np.namespace, "name": np.name},
	}
}

# --- what may open a tenant namespace: only what its allow lists render (modules/tenant.py) ------------

namespace_peer(name) := {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

dns_peer := object.union(namespace_peer("kube-system"), {"podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}})

# A peer of the namespace's own pods (podSelector alone), or of a namespace named exactly, possibly
# narrowed to some of its pods.
same_namespace(peer) if object.keys(peer) == {"podSelector"}

named_namespace(peer) := name if {
	object.keys(peer) in {{"namespaceSelector"}, {"namespaceSelector", "podSelector"}}
	peer.namespaceSelector == {"matchLabels": {"kubernetes.io/metadata.name": peer.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]}}
	name := peer.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]
}

# The peers a tenant's allow lists render (modules/tenant.py), exactly: besides its own pods, ingress
# from itself and the tenants in allow_from_tenants; egress to itself, cluster DNS when
# network.allow_dns, and its egress_cidrs. Looked up before anything else is computed. Objects built
# once by comprehension, not partial rules: OPA re-runs a partial rule's body over every tenant at each
# lookup by key (8,000,000 evaluations and 24 s for the generated fleet's 1,000 tenants).
ingress_peers := {tenant.name: peers |
	some tenant in input.spec.tenants
	peers := {namespace_peer(name) | some name in array.concat([tenant.name], tenant.network.allow_from_tenants)}
}

egress_peers := {tenant.name: peers |
	some tenant in input.spec.tenants
	cidrs := {{"ipBlock": {"cidr": cidr}} | some cidr in tenant.network.egress_cidrs}
	peers := ({namespace_peer(tenant.name)} | {p | input.spec.network.allow_dns; p := dns_peer}) | cidrs
}

# What else is allowed: a namespace peer above narrowed to some of its pods, and a center endpoint
# of allow_to_endpoints with every port of the rule one of the endpoint's.
ingress_allowed(tenant, peer) if named_namespace(peer) in {tenant.name} | {t | some t in tenant.network.allow_from_tenants}

egress_allowed(tenant, peer, _) if named_namespace(peer) == tenant.name

egress_allowed(tenant, peer, ports) if {
	object.keys(peer) == {"ipBlock"}
	some name in tenant.network.allow_to_endpoints
	some e in input.spec.network.center_endpoints
	e.name == name
	e.cidr == peer.ipBlock.cidr
	on_ports(ports, {port | some port in e.ports})
}

# Every opening of a tenant namespace's NetworkPolicies that its allow lists do not produce: a rule
# without peers (every source or destination), or a peer outside the lists (an empty or label-matched
# namespaceSelector reaches every namespace or any that takes the label; an ingress ipBlock, undeclared
# CIDRs, endpoint ports beyond the declared ones).
openings contains {"np": key(np), "what": sprintf("ingress rule %d allows every source", [i + 1])} if {
	some np in network_policies
	some i, rule in np.manifest.spec.ingress
	count(object.get(rule, "from", [])) == 0
	in_tenant_namespace(np)
}

openings contains {"np": key(np), "what": sprintf("egress rule %d allows every destination", [i + 1])} if {
	some np in network_policies
	some i, rule in np.manifest.spec.egress
	count(object.get(rule, "to", [])) == 0
	in_tenant_namespace(np)
}

openings contains {"np": key(np), "what": sprintf("ingress rule %d peer %d is not in the tenant's allow lists", [i + 1, j + 1])} if {
	some np in network_policies
	some i, rule in np.manifest.spec.ingress
	some j, peer in rule.from
	not same_namespace(peer) # its own pods: most peers, so checked first
	not peer in ingress_peers[np.namespace]
	not ingress_allowed(tenants[np.namespace], peer)
	in_tenant_namespace(np)
}

openings contains {"np": key(np), "what": sprintf("egress rule %d peer %d is not in the tenant's allow lists", [i + 1, j + 1])} if {
	some np in network_policies
	some i, rule in np.manifest.spec.egress
	some j, peer in rule.to
	not same_namespace(peer) # its own pods: most peers, so checked first
	not peer in egress_peers[np.namespace]
	not egress_allowed(tenants[np.namespace], peer, object.get(rule, "ports", []))
	in_tenant_namespace(np)
}

key(np) := {"cluster": np.cluster, "namespace": np.namespace, "name": np.name}

# Tested last in each opening: almost every NetworkPolicy is in a tenant namespace, and few peers get
# that far, so the name is built for them only.
in_tenant_namespace(np) if sprintf("%s/%s", [np.cluster, np.namespace]) in data.fleet.lib.tenant_namespaces

# METADATA
# title: Tenant NetworkPolicies open only what the allow lists declare
# description: In a tenant namespace every NetworkPolicy peer is its own pods, cluster DNS, a tenant named in allow_from_tenants (ingress), an egress_cidrs block or a center endpoint on its ports (egress); a rule without peers, an empty or label-matched namespaceSelector, or an ingress ipBlock opens the tenant to more than its environment file says.
# custom:
#   severity: high
#   control_id: FLEET-NET-04
#   fix: "declare the peer in the tenant's network allow lists (allow_from_tenants, egress_cidrs, allow_to_endpoints) instead of rendering it"
deny contains d if {
	some o in openings
	np := o.np
	d := {
		"rule": "network.tenant_opened",
		"severity": "high",
		"msg": sprintf("%s: NetworkPolicy %s/%s: %s", [np.cluster, np.namespace, np.name, o.what]),
		"resource": {"cluster": np.cluster, "tenant": np.namespace, "kind": "NetworkPolicy", "namespace": np.namespace, "name": np.name},
	}
}
