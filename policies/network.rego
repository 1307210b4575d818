# METADATA
# title: Tenant network isolation
# description: Tenant namespaces deny by default, never open egress to the whole internet, and edge namespaces reach only allow-listed center endpoints.
package fleet.network

cfg := data.fleet_data.network

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
#   location: {causes: [network.default_deny]}
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
#   location: {field: network.egress_cidrs}
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
#   location: {causes: [network.center_endpoints]}
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

# --- what may open a tenant namespace: the flows fleetops computed from the environment -------------

# input.facts.reach.namespaces: "cluster/namespace" -> {ingress, egress}: each flow into or out of that
# tenant namespace (fleetops.spec.intent, the model render reads too): the other end's name and its
# ports ("443/TCP"; none: every port); input.facts.reach.peers: each end's name -> the peer it is rendered as.
reach := input.facts.reach.namespaces

peers := input.facts.reach.peers

# A peer of the namespace's own pods (podSelector alone), or of a namespace named exactly, possibly
# narrowed to some of its pods.
same_namespace(peer) if object.keys(peer) == {"podSelector"}

named_namespace(peer) := name if {
	object.keys(peer) in {{"namespaceSelector"}, {"namespaceSelector", "podSelector"}}
	peer.namespaceSelector == {"matchLabels": {"kubernetes.io/metadata.name": peer.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]}}
	name := peer.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]
}

# A rule's peer is one a flow opens: the flow's own peer, or a namespace the flow opens whole narrowed to
# some of its pods; and every port of the rule is one of the flow's (a flow without ports opens them all;
# a rule without ports, or with endPort, asks for more than a flow with ports).
flow_allows(flow, peer, ports) if {
	opens_peer(peers[flow.peer], peer)
	within(ports, flow.ports)
}

opens_peer(flow_peer, peer) if flow_peer == peer

opens_peer(flow_peer, peer) if {
	object.keys(flow_peer) == {"namespaceSelector"}
	named_namespace(peer) == named_namespace(flow_peer)
}

within(_, flow_ports) if count(flow_ports) == 0

within(ports, flow_ports) if {
	count(ports) > 0
	every p in ports {
		not p.endPort
		port_key(p) in flow_ports
	}
}

# Its own namespace by name is its own pods, as the podSelector of the flow to itself.
allowed(np, _, peer, _) if named_namespace(peer) == np.namespace

allowed(np, direction, peer, rule) if {
	some flow in reach[sprintf("%s/%s", [np.cluster, np.namespace])][direction]
	flow_allows(flow, peer, object.get(rule, "ports", []))
}

# Every opening of a tenant namespace's NetworkPolicies that no flow of its environment asks for: a rule
# without peers (every source or destination), or a peer no flow names (an empty or label-matched
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
	not allowed(np, "ingress", peer, rule)
	in_tenant_namespace(np)
}

openings contains {"np": key(np), "what": sprintf("egress rule %d peer %d is not in the tenant's allow lists", [i + 1, j + 1])} if {
	some np in network_policies
	some i, rule in np.manifest.spec.egress
	some j, peer in rule.to
	not same_namespace(peer) # its own pods: most peers, so checked first
	not allowed(np, "egress", peer, rule)
	in_tenant_namespace(np)
}

key(np) := {"cluster": np.cluster, "namespace": np.namespace, "name": np.name}

# Tested last in each opening: almost every NetworkPolicy is in a tenant namespace, and few peers get
# that far, so the name is built for them only.
in_tenant_namespace(np) if sprintf("%s/%s", [np.cluster, np.namespace]) in data.fleet.lib.tenant_namespaces

# METADATA
# title: Tenant NetworkPolicies open only what the allow lists declare
# description: In a tenant namespace every NetworkPolicy peer is one a declared flow opens (facts.reach), its own pods, cluster DNS, a tenant it lets in or one that lets it in (allow_from_tenants), an egress_cidrs block or a center endpoint on its ports; a rule without peers, an empty or label-matched namespaceSelector, or an ingress ipBlock opens the tenant to more than its environment file says.
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

# --- what the environment declares must be open: each flow, at each tenant end -----------------------

# Every (namespace, direction, peer, port) a tenant namespace's NetworkPolicies open, "*" for a rule
# without ports; built once over the rendered policies, then looked up per flow.
rendered_openings contains {"ns": sprintf("%s/%s", [np.cluster, np.namespace]), "dir": direction, "peer": peer, "port": port} if {
	some np in network_policies
	np.manifest.spec.podSelector == {}
	some direction, field in {"ingress": "from", "egress": "to"}
	some rule in np.manifest.spec[direction]
	some peer in rule[field]
	some port in rule_ports(rule)
}

rule_ports(rule) := {"*"} if count(object.get(rule, "ports", [])) == 0

rule_ports(rule) := ports if {
	count(rule.ports) > 0
	ports := {port_key(p) | some p in rule.ports}
}

port_key(p) := sprintf("%v/%s", [p.port, object.get(p, "protocol", "TCP")])

opened(ns, direction, flow) if {
	count(flow.ports) == 0
	{"ns": ns, "dir": direction, "peer": peers[flow.peer], "port": "*"} in rendered_openings
}

opened(ns, direction, flow) if {
	count(flow.ports) > 0
	every port in flow.ports {
		some p in {port, "*"}
		{"ns": ns, "dir": direction, "peer": peers[flow.peer], "port": p} in rendered_openings
	}
}

side_words := {"ingress": ["in from", "ingress"], "egress": ["out to", "egress"]}

# METADATA
# title: Every declared flow is open at both of its tenant ends
# description: A flow the environment declares (facts.reach, e.g. speech's allow_from_tenants naming vision) passes only when the destination's NetworkPolicies open its ingress and the source's open its egress; a tenant namespace is isolated both ways, so a flow opened on one side only can never be made.
# custom:
#   severity: high
#   control_id: FLEET-NET-05
#   fix: "render both ends of every flow from fleetops.spec.reach (modules/tenant.py network_manifests)"
deny contains d if {
	some ns, sides in reach
	some direction, flows in sides
	some flow in flows
	not opened(ns, direction, flow)
	parts := split(ns, "/")
	d := {
		"rule": "network.flow_blocked",
		"severity": "high",
		"msg": sprintf("%s: tenant %s must be open %s %s on %s, but no NetworkPolicy of its namespace opens that %s: the traffic can never flow", [parts[0], parts[1], side_words[direction][0], flow.peer, ports_shown(flow.ports), side_words[direction][1]]),
		"resource": {"cluster": parts[0], "tenant": parts[1], "kind": "Namespace", "name": parts[1]},
	}
}

ports_shown(ports) := "every port" if count(ports) == 0

ports_shown(ports) := concat(",", ports) if count(ports) > 0

# METADATA
# title: Opening a strict tenant needs approvals
# description: A change that opens traffic into a tenant marked isolation strict (a flow of fleetops.spec.reach at head that the base did not have, on a port it did not open; input.change.strict_opened from fleetops plan) needs the change rules' number of approvals.
# custom:
#   severity: high
#   control_id: FLEET-NET-06
#   fix: "get the required approvals from the strict tenant's owners, or leave the tenant closed"
#   gate: approval
deny contains d if {
	some flow in input.change.strict_opened
	object.get(input.change, "approvals", 0) < data.fleet_data.change.required_approvals
	d := {
		"rule": "network.strict_tenant_opened",
		"severity": "high",
		"msg": sprintf("%s (isolation strict) needs %d approvals, has %d", [flow.text, data.fleet_data.change.required_approvals, object.get(input.change, "approvals", 0)]),
		"resource": {"cluster": flow.cluster, "tenant": flow.to, "kind": "Namespace", "name": flow.to},
	}
}
