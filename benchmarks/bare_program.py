"""Baseline Pulumi program for render_bench: the same Kubernetes objects, registered with the bare SDK.

It reads the manifests that `render` produced (config `fleetops:manifests`, a JSON file of
cluster -> [manifest]) and registers each with its pulumi_kubernetes class (same type, name and
inputs as `modules.kube.declare` gives it) under one Provider per cluster, with no components and no
environment model. Render time divided by this program's time is what the components cost.
"""

import json

import pulumi
import pulumi_kubernetes as k8s

from modules.kube import Target, declare

config = pulumi.Config("fleetops")
clusters = json.loads(open(config.require("manifests"), encoding="utf-8").read())
for cluster, manifests in clusters.items():
    provider = k8s.Provider(cluster, context=cluster, enable_server_side_apply=True)
    target = Target(cluster=cluster, environment=pulumi.get_stack(), provider=provider)
    for manifest in manifests:
        declare(None, target, manifest)
