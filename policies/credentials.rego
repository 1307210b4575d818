# METADATA
# title: Credentials
# description: fleetops renders no secret material. Credentials a cluster needs (a MultiKueue worker's kubeconfig, the fleet API's tokens and TLS) are Secrets the operator creates, named by what fleetops renders and never written by it, so that nothing in Git or in a rendered file holds them.
package fleet.credentials

# METADATA
# title: No Secret with data is rendered
# description: No rendered Secret carries data or stringData. A Secret a MultiKueueCluster reads (its spec.clusterSource.kubeConfig.location, in Kueue's namespace) holds a kubeconfig with the worker's credentials; it is the operator's to create (README.md, Spill-over), as is every other Secret fleetops names.
# custom:
#   severity: critical
#   control_id: FLEET-CRED-01
#   fix: "remove the Secret from the program; create it on the cluster out of band (README.md, Spill-over)"
deny contains d if {
	some r in data.fleet.lib.of_kind("Secret")
	some field in ["data", "stringData"]
	count(object.get(r.manifest, field, {})) > 0
	d := {
		"rule": "credentials.secret_rendered",
		"severity": "critical",
		"msg": sprintf("%s: Secret %s/%s is rendered with %s%s: secret material must never be in Git; the operator creates it", [r.cluster, r.namespace, r.name, field, reader(r)]),
		"resource": {"cluster": r.cluster, "kind": r.kind, "namespace": r.namespace, "name": r.name},
	}
}

# Who reads the Secret, where a MultiKueueCluster of its cluster names it.
reader(r) := sprintf(" (the kubeconfig MultiKueueCluster %s reads)", [c.name]) if {
	some c in data.fleet.lib.of_kind("MultiKueueCluster")
	c.cluster == r.cluster
	c.manifest.spec.clusterSource.kubeConfig.location == r.name
} else := ""
