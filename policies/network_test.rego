package fleet.network_test

import data.fleet.network

namespace(cluster, name) := {"cluster": cluster, "kind": "Namespace", "name": name, "manifest": {"metadata": {"labels": {"fleetops.io/tenant": name}}}}

netpol(cluster, ns, name, spec) := {"cluster": cluster, "kind": "NetworkPolicy", "namespace": ns, "name": name, "manifest": {"spec": spec}}

deny_all(cluster, ns) := netpol(cluster, ns, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})

egress(cluster, ns, cidr, port) := netpol(cluster, ns, "allow-out", {
	"podSelector": {},
	"policyTypes": ["Egress"],
	"egress": [{"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"port": port, "protocol": "TCP"}]}],
})

tenant(name, cluster, network) := {"name": name, "clusters": [cluster], "network": object.union({"egress_cidrs": [], "allow_from_tenants": [], "allow_to_endpoints": []}, network)}

base := {
	"spec": {
		"clusters": [{"name": "center", "role": "center"}, {"name": "edge", "role": "edge"}],
		"network": {"allow_dns": true, "center_endpoints": [{"name": "registry", "cidr": "10.20.0.0/24", "ports": [443]}]},
		"tenants": [
			tenant("a", "center", {"egress_cidrs": ["10.30.0.0/16"], "allow_from_tenants": ["b"]}),
			tenant("b", "center", {}),
			tenant("e", "edge", {"allow_to_endpoints": ["registry"]}),
		],
	},
	"facts": {"egress": {}, "reach": {"peers": peers, "namespaces": reach}},
	"resources": [
		namespace("center", "a"), deny_all("center", "a"), own("center", "a"), dns("center", "a"), cidrs("center", "a", "10.30.0.0/16"),
		netpol("center", "a", "allow-from-tenants", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [ns_peer("b")]}]}),
		namespace("center", "b"), deny_all("center", "b"), own("center", "b"), dns("center", "b"),
		netpol("center", "b", "allow-to-tenants", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [ns_peer("a")]}]}),
		namespace("edge", "e"), deny_all("edge", "e"), own("edge", "e"), dns("edge", "e"), egress("edge", "e", "10.20.0.0/24", 443),
	],
}

# facts.reach as fleetops.spec.reach computes it for `base`: a lets b in (so b's egress opens to a).
ns_peer(name) := {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

dns_peer := object.union(ns_peer("kube-system"), {"podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}})

flow(peer, ports) := {"peer": peer, "ports": ports}

self := flow("itself", [])

dns_flow := flow("cluster DNS", ["53/UDP", "53/TCP"])

peers := {
	"itself": {"podSelector": {}}, "cluster DNS": dns_peer, "tenant a": ns_peer("a"), "tenant b": ns_peer("b"),
	"10.30.0.0/16": {"ipBlock": {"cidr": "10.30.0.0/16"}}, "registry (10.20.0.0/24)": {"ipBlock": {"cidr": "10.20.0.0/24"}},
}

reach := {
	"center/a": {"ingress": [self, flow("tenant b", [])], "egress": [self, dns_flow, flow("10.30.0.0/16", [])]},
	"center/b": {"ingress": [self], "egress": [self, dns_flow, flow("tenant a", [])]},
	"edge/e": {"ingress": [self], "egress": [self, dns_flow, flow("registry (10.20.0.0/24)", ["443/TCP"])]},
}

own(cluster, ns) := netpol(cluster, ns, "allow-same-namespace", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [{"podSelector": {}}]}], "egress": [{"to": [{"podSelector": {}}]}]})

dns(cluster, ns) := netpol(cluster, ns, "allow-dns", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [dns_peer], "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]})

cidrs(cluster, ns, cidr) := netpol(cluster, ns, "allow-egress-cidrs", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": cidr}}]}]})

rules(decisions) := {d.rule | some d in decisions}

with_resources(extra) := object.union(base, {"resources": array.concat(base.resources, extra)})

test_clean_input_has_no_decisions if {
	count(network.deny) == 0 with input as base
}

without_default_deny(ns) := object.union(base, {"resources": [r | some r in base.resources; not r == deny_all("center", ns)]})

test_missing_default_deny_fires if {
	decisions := network.deny with input as without_default_deny("b")
	some d in decisions
	d.rule == "network.missing_default_deny"
	d.resource.tenant == "b"
}

test_a_policy_with_rules_is_not_default_deny if {
	open := netpol("center", "b", "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}]})
	"network.missing_default_deny" in rules(network.deny) with input as object.union(without_default_deny("b"), {"resources": array.concat(without_default_deny("b").resources, [open])})
}

test_a_namespace_without_the_tenant_label_is_still_a_tenant if {
	# The tenant list comes from the environment file, not from what the program labels.
	unlabelled := object.union(without_default_deny("b"), {"resources": [r | some r in without_default_deny("b").resources; not r == namespace("center", "b")]})
	"network.missing_default_deny" in rules(network.deny) with input as unlabelled
}

# facts.egress as fleetops.policy.egress_coverage computes it: the union of a namespace's egress blocks.
coverage(ipv4, ipv6, invalid) := {"center/a": {"cluster": "center", "namespace": "a", "invalid": invalid, "ipv4": ipv4, "ipv6": ipv6}}

none := {"cidrs": [], "share": 0}

test_egress_over_the_ipv4_share_fires if {
	decisions := network.deny with input as object.union(base, {"facts": {"egress": coverage({"cidrs": ["0.0.0.0/0"], "share": 1}, none, [])}})
	some d in decisions
	d.rule == "network.egress_anywhere"
	d.msg == "center: NetworkPolicies in namespace a allow egress to 0.0.0.0/0 together (their union), more of the IPv4 address space than network.max_egress_share allows"
}

test_egress_over_the_ipv6_share_fires if {
	decisions := network.deny with input as object.union(base, {"facts": {"egress": coverage(none, {"cidrs": ["::/1", "c000::/2"], "share": 0.75}, [])}})
	some d in decisions
	d.msg == "center: NetworkPolicies in namespace a allow egress to ::/1, c000::/2 together (their union), more of the IPv6 address space than network.max_egress_share allows"
}

test_egress_within_the_share_passes if {
	count(network.deny) == 0 with input as object.union(base, {"facts": {"egress": coverage({"cidrs": ["10.0.0.0/8"], "share": 0.00390625}, none, [])}})
}

test_egress_that_cannot_be_measured_fires if {
	decisions := network.deny with input as object.union(base, {"facts": {"egress": coverage(none, none, ["anywhere"])}})
	some d in decisions
	d.msg == "center: NetworkPolicies in namespace a allow egress to anywhere, which is not a CIDR and cannot be measured"
}

translated(ipv4, ipv6, through, reached) := {"center/a": object.union(coverage(ipv4, ipv6, [])["center/a"], {"translated": object.union(reached, {"through": through})})}

test_egress_through_a_translator_over_the_ipv4_share_fires if {
	facts := translated(none, {"cidrs": ["64:ff9b::/96"], "share": 1.2e-20}, ["64:ff9b::/96"], {"cidrs": ["0.0.0.0/0"], "share": 1})
	decisions := network.deny with input as object.union(base, {"facts": {"egress": facts}})
	{d.rule | some d in decisions} == {"network.egress_translated"}
	some d in decisions
	d.msg == "center: NetworkPolicies in namespace a allow egress to 64:ff9b::/96, which reach IPv4 through a translator (NAT64, SIIT, 6to4, Teredo): with the namespace's IPv4 blocks, 0.0.0.0/0, more of the IPv4 address space than network.max_egress_share allows"
}

test_egress_through_a_translator_is_not_denied_twice if {
	wide := translated(none, {"cidrs": ["::/1"], "share": 0.5}, ["::/1"], {"cidrs": ["0.0.0.0/0"], "share": 1})
	{d.rule | some d in network.deny} == {"network.egress_anywhere"} with input as object.union(base, {"facts": {"egress": wide}})
}

test_egress_through_a_translator_within_the_share_passes if {
	narrow := translated(none, {"cidrs": ["64:ff9b::a00:0/104"], "share": 1e-30}, ["64:ff9b::a00:0/104"], {"cidrs": ["10.0.0.0/8"], "share": 0.00390625})
	count(network.deny) == 0 with input as object.union(base, {"facts": {"egress": narrow}})
}

opened(rules) := with_resources([netpol("center", "a", "extra", object.union({"podSelector": {}}, rules))])

opening(decisions) := {d.msg | some d in decisions; d.rule == "network.tenant_opened"}

test_the_allow_lists_themselves_open_nothing if {
	allowed := {"policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [
		{"podSelector": {}},
		{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "b"}}, "podSelector": {"matchLabels": {"app": "x"}}},
	]}], "egress": [{"to": [
		{"podSelector": {"matchLabels": {"app": "y"}}},
		{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}}},
		{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}}, "podSelector": {"matchLabels": {"app": "z"}}},
		{"ipBlock": {"cidr": "10.30.0.0/16"}},
	]}, {"to": [dns_peer], "ports": [{"port": 53, "protocol": "UDP"}]}]}
	count(network.deny) == 0 with input as opened(allowed)
}

test_a_rule_without_peers_opens_the_tenant if {
	opening(network.deny) == {"center: NetworkPolicy a/extra: ingress rule 1 allows every source", "center: NetworkPolicy a/extra: egress rule 2 allows every destination"} with input as opened({"ingress": [{}], "egress": [{"to": [{"podSelector": {}}]}, {"to": []}]})
}

test_peers_outside_the_allow_lists_open_the_tenant if {
	wide := {"ingress": [{"from": [{"namespaceSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]}], "egress": [{"to": [
		{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "b"}}},
		{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
		{"ipBlock": {"cidr": "10.31.0.0/16"}},
	]}]}
	opening(network.deny) == {
		"center: NetworkPolicy a/extra: ingress rule 1 peer 1 is not in the tenant's allow lists",
		"center: NetworkPolicy a/extra: ingress rule 1 peer 2 is not in the tenant's allow lists",
		"center: NetworkPolicy a/extra: egress rule 1 peer 1 is not in the tenant's allow lists",
		"center: NetworkPolicy a/extra: egress rule 1 peer 2 is not in the tenant's allow lists",
		"center: NetworkPolicy a/extra: egress rule 1 peer 3 is not in the tenant's allow lists",
	} with input as opened(wide)
}

no_dns_egress(sides) := {"ingress": sides.ingress, "egress": [f | some f in sides.egress; f != dns_flow]}

test_dns_is_allowed_only_when_the_environment_allows_it if {
	without := {ns: no_dns_egress(sides) | some ns, sides in reach}
	no_dns := object.union(opened({"egress": [{"to": [dns_peer]}]}), {"facts": {"reach": {"peers": peers, "namespaces": without}}})
	"network.tenant_opened" in rules(network.deny) with input as no_dns
}

test_an_endpoint_is_reached_only_on_its_ports if {
	on_port := netpol("edge", "e", "extra", {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.0/24"}}], "ports": [{"port": 443, "protocol": "TCP"}]}]})
	count(network.deny) == 0 with input as with_resources([on_port])
	every_port := netpol("edge", "e", "extra", {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.0/24"}}]}]})
	"network.tenant_opened" in rules(network.deny) with input as with_resources([every_port])
	port_range := netpol("edge", "e", "extra", {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.0/24"}}], "ports": [{"port": 443, "endPort": 65535}]}]})
	rules(network.deny) == {"network.tenant_opened", "network.edge_egress_not_allowed"} with input as with_resources([port_range])
}

test_policies_outside_tenant_namespaces_are_not_judged_for_opening if {
	count(opening(network.deny)) == 0 with input as with_resources([netpol("center", "monitoring", "open", {"podSelector": {}, "ingress": [{}]})])
}

test_edge_egress_outside_allow_list_fires if {
	"network.edge_egress_not_allowed" in rules(network.deny) with input as with_resources([egress("edge", "e", "10.30.0.0/16", 443)])
}

test_edge_egress_on_undeclared_port_fires if {
	"network.edge_egress_not_allowed" in rules(network.deny) with input as with_resources([egress("edge", "e", "10.20.0.0/24", 22)])
}

test_a_labelled_namespace_the_environment_does_not_declare_is_a_tenant_too if {
	decisions := network.deny with input as with_resources([namespace("center", "z")])
	some d in decisions
	d.msg == "center: tenant namespace z has no default-deny NetworkPolicy for ingress and egress"
}

blocked(decisions) := {d.msg | some d in decisions; d.rule == "network.flow_blocked"}

test_a_flow_opened_at_one_end_only_is_blocked if {
	# speech lets vision in, but vision's egress is never opened toward speech: the defect of issue 35.
	one_sided := [r | some r in base.resources; r.name != "allow-to-tenants"]
	blocked(network.deny) == {"center: tenant b must be open out to tenant a on every port, but no NetworkPolicy of its namespace opens that egress: the traffic can never flow"} with input as object.union(base, {"resources": one_sided})
}

test_a_flow_is_open_only_on_every_port_it_declares if {
	narrowed := [r | some r in base.resources; r.name != "allow-dns"]
	udp_only := netpol("edge", "e", "allow-dns", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [dns_peer], "ports": [{"port": 53, "protocol": "UDP"}]}]})
	blocked(network.deny) == {
		"center: tenant a must be open out to cluster DNS on 53/UDP,53/TCP, but no NetworkPolicy of its namespace opens that egress: the traffic can never flow",
		"center: tenant b must be open out to cluster DNS on 53/UDP,53/TCP, but no NetworkPolicy of its namespace opens that egress: the traffic can never flow",
		"edge: tenant e must be open out to cluster DNS on 53/UDP,53/TCP, but no NetworkPolicy of its namespace opens that egress: the traffic can never flow",
	} with input as object.union(base, {"resources": array.concat(narrowed, [udp_only])})
}

test_ingress_missing_at_the_destination_is_blocked_too if {
	blocked(network.deny) == {"center: tenant a must be open in from tenant b on every port, but no NetworkPolicy of its namespace opens that ingress: the traffic can never flow"} with input as object.union(base, {"resources": [r | some r in base.resources; r.name != "allow-from-tenants"]})
}

strict_opened := {"cluster": "center", "to": "a", "from": "b", "ports": ["*"], "opened": true, "strict": true, "text": "center: a ← b :every port opened"}

test_opening_a_strict_tenant_needs_approvals if {
	decisions := network.deny with input as object.union(base, {"change": {"approvals": 1, "strict_opened": [strict_opened]}})
	{d.msg | some d in decisions; d.rule == "network.strict_tenant_opened"} == {"center: a ← b :every port opened (isolation strict) needs 2 approvals, has 1"}
	count(network.deny) == 0 with input as object.union(base, {"change": {"approvals": 2, "strict_opened": [strict_opened]}})
	count(network.deny) == 0 with input as object.union(base, {"change": {"approvals": 0, "strict_opened": []}})
}
