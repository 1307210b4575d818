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

base := {
	"spec": {
		"clusters": [{"name": "center", "role": "center"}, {"name": "edge", "role": "edge"}],
		"network": {"center_endpoints": [{"name": "registry", "cidr": "10.20.0.0/24", "ports": [443]}]},
	},
	"resources": [
		namespace("center", "a"), deny_all("center", "a"), egress("center", "a", "10.30.0.0/16", 8080),
		namespace("edge", "e"), deny_all("edge", "e"), egress("edge", "e", "10.20.0.0/24", 443),
	],
}

rules(decisions) := {d.rule | some d in decisions}

with_resources(extra) := object.union(base, {"resources": array.concat(base.resources, extra)})

test_clean_input_has_no_decisions if {
	count(network.deny) == 0 with input as base
}

test_missing_default_deny_fires if {
	decisions := network.deny with input as with_resources([namespace("center", "b")])
	some d in decisions
	d.rule == "network.missing_default_deny"
	d.resource.tenant == "b"
}

test_a_policy_with_rules_is_not_default_deny if {
	open := netpol("center", "b", "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}]})
	"network.missing_default_deny" in rules(network.deny) with input as with_resources([namespace("center", "b"), open])
}

test_egress_anywhere_fires if {
	"network.egress_anywhere" in rules(network.deny) with input as with_resources([egress("center", "a", "0.0.0.0/0", 443)])
}

test_edge_egress_outside_allow_list_fires if {
	"network.edge_egress_not_allowed" in rules(network.deny) with input as with_resources([egress("edge", "e", "10.30.0.0/16", 443)])
}

test_edge_egress_on_undeclared_port_fires if {
	"network.edge_egress_not_allowed" in rules(network.deny) with input as with_resources([egress("edge", "e", "10.20.0.0/24", 22)])
}
