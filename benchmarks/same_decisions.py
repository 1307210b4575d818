"""Do two trees' policies decide the same? For rewrites of the Rego that must not change a decision.

    .venv/bin/python benchmarks/same_decisions.py OTHER_TREE [--cases dev,gen0.1]   # e.g. a `git archive main` copy

Judges dev, staging, prod and the generated fleet (scales 0.1 and 1) with the embedded engine, each
as rendered and with violations seeded (`seeded_input`: openings and look-alikes that pass in every
7th tenant's namespaces, RBAC, workload, admission objects on every cluster, rendered objects
widened or dropped, quotas raised), once with this tree and once with OTHER_TREE, each in a process
of its own that imports that tree's fleetops and reads its policies. Exit 0 when every case has the
same decisions, 1 with the first differences otherwise. Not a benchmark: `make bench` does not run it.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ("dev", "staging", "prod", "gen0.1", "gen1.0")
TODAY = dt.date(2026, 12, 2)
RBAC = "rbac.authorization.k8s.io/v1"
Manifest = dict[str, Any]


def _meta(name: str, namespace: str | None = None) -> dict[str, str]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def _namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def _tenant_objects(i: int, tenant: dict[str, Any], other: str, endpoints: list[dict[str, Any]]) -> list[Manifest]:
    """A NetworkPolicy with every kind of peer, allowed or not, and a privileged pod, in the tenant's namespace."""
    name = tenant["name"]
    sources = [{}, {"podSelector": {"matchLabels": {"a": "b"}}}, _namespace(name), _namespace(other),
               {**_namespace(name), "podSelector": {"matchLabels": {"x": "y"}}}, {**_namespace(other), "podSelector": {}},
               {"namespaceSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}, {"namespaceSelector": {"matchLabels": {"team": "a"}}}]
    sources += [_namespace(t) for t in tenant["network"]["allow_from_tenants"]]
    targets = [_namespace(name), {**_namespace(name), "podSelector": {"matchLabels": {"q": "r"}}}, _namespace(other), {"namespaceSelector": {}},
               {**_namespace("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
               {"ipBlock": {"cidr": "192.168.0.0/16"}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}]
    targets += [{"ipBlock": {"cidr": c}} for c in tenant["network"]["egress_cidrs"]]
    egress: list[dict[str, Any]] = [{"to": targets}, {}, {"to": []}]
    for e in endpoints:
        for ports in ([], [{"port": p} for p in e["ports"]], [{"port": 1}], [{"port": e["ports"][0], "endPort": 9999}]):
            egress.append({"to": [{"ipBlock": {"cidr": e["cidr"]}}], "ports": ports})
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(f"seed-{i}", name),
              "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": sources}, {}], "egress": egress}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(f"p{i}", name),
           "spec": {"hostNetwork": True, "serviceAccountName": "fleetops-reconciler", "volumes": [{"name": "v", "hostPath": {"path": "/etc"}}],
                    "containers": [{"name": "m", "image": "x", "ports": [{"hostPort": 80}],
                                    "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}}}]}}
    return [policy, pod]


def _cluster_objects(k: int, namespace: str) -> list[Manifest]:
    """Wide, sensitive and aggregating roles, bindings for everyone and of the reconciler's role, a thief, a host volume, hooks."""
    return [
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(f"wide-{k}"),
         "rules": [{"apiGroups": ["*"], "resources": ["secrets", "pods/exec"], "verbs": ["get", "create", "bind"]}]},
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(f"agg-{k}"), "aggregationRule": {}, "rules": []},
        {"apiVersion": RBAC, "kind": "Role", "metadata": _meta(f"sec-{k}", namespace), "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]},
        {"apiVersion": RBAC, "kind": "RoleBinding", "metadata": _meta(f"sec-{k}", namespace), "roleRef": {"kind": "Role", "name": f"sec-{k}"},
         "subjects": [{"kind": "ServiceAccount", "name": f"sec-{k}"}, {"kind": "Group", "name": "system:serviceaccounts:x"}]},
        {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": _meta(f"admin-{k}"), "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"kind": "Group", "name": "system:authenticated"}, {"kind": "User", "name": "system:anonymous"}]},
        {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": _meta(f"lend-{k}"), "roleRef": {"kind": "ClusterRole", "name": "fleetops-reconciler"},
         "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": namespace},
                      {"kind": "ServiceAccount", "name": "fleetops-reconciler", "namespace": "fleetops-system"}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("thief", "fleetops-system"),
         "spec": {"template": {"spec": {"serviceAccountName": "fleetops-reconciler", "containers": [{"name": "m", "image": "evil"}]}}}},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": _meta(f"pv-{k}"), "spec": {"hostPath": {"path": "/"}}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": _meta(f"w-{k}"), "webhooks": []},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": _meta(f"crd-{k}"), "spec": {"conversion": {"strategy": "Webhook"}}},
    ]


def _changed(i: int, kind: str, manifest: Manifest) -> Manifest | None:
    """A rendered object widened (a system DaemonSet's image, a role's rules, an edge disconnect policy's
    patch or binding), stripped of its Pod Security label, or dropped (None), for some of each kind."""
    m = copy.deepcopy(manifest)
    if kind == "ResourceQuota" and i % 11 == 0 or kind == "NetworkPolicy" and m["metadata"]["name"] == "default-deny" and i % 13 == 0:
        return None
    if kind == "Namespace" and i % 9 == 0:
        m["metadata"].get("labels", {}).pop("pod-security.kubernetes.io/enforce", None)
    elif kind == "DaemonSet" and i % 5 == 0:
        m["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:1"
    elif kind == "MutatingAdmissionPolicy" and i % 3 == 0:
        m["spec"]["mutations"].append({"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/containers', value: []}]"}})
    elif kind == "MutatingAdmissionPolicyBinding" and i % 4 == 0:
        m["spec"]["paramRef"] = {"name": "x"}
    elif kind == "ClusterRole" and i % 6 == 0:
        m["rules"] = m.get("rules", []) + [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    return m


def seeded_input(env: Any, state: Any) -> dict[str, Any]:
    """The policy input of a rendered environment with violations (and look-alikes that pass) seeded."""
    from fleetops import policy

    plain = policy.policy_input(env, state)
    tenants = plain["spec"]["tenants"]
    names = [t["name"] for t in tenants]
    entries = []
    for i, (cluster, manifest) in enumerate(state.objects()):
        kept = _changed(i, policy.resource_entry(cluster, manifest)["kind"], manifest)
        entries += [policy.resource_entry(cluster, kept)] if kept is not None else []
    for i, tenant in enumerate(tenants[::7]):
        for cluster in tenant["clusters"]:
            other = names[(7 * i + 1) % len(names)]
            entries += [policy.resource_entry(cluster, m) for m in _tenant_objects(i, tenant, other, plain["spec"]["network"]["center_endpoints"])]
    for k, cluster in enumerate(sorted(state.clusters)):
        entries += [policy.resource_entry(cluster, m) for m in _cluster_objects(k, names[k % len(names)])]
    document = policy.build_input(env, entries, state.revision)
    for tenant in document["spec"]["tenants"][::5]:
        for quota in tenant["quota"].values():
            quota["burst"] *= 1000
            quota["guaranteed"] *= 3
    return document


def decisions(cases: list[str]) -> dict[str, list[str]]:
    """case -> its decisions as sorted JSON lines, judged by the fleetops and policies beside this file."""
    from benchmarks.generate import synthetic_yaml
    from fleetops import policy, render, spec

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            path = ROOT / "environments" / f"{case}.yaml"
            if case.startswith("gen"):
                path = Path(tmp) / case / "large.yaml"
                path.parent.mkdir()
                path.write_text(synthetic_yaml(float(case.removeprefix("gen"))))
            env, state = spec.load_environment(path), render.render(path, revision="same")
            for name, document in ((case, policy.policy_input(env, state)), (f"{case}+seeded", seeded_input(env, state))):
                verdict = policy.evaluate_input(document, today=TODAY, policies_dir=ROOT / "policies")
                out[name] = sorted(json.dumps(row, sort_keys=True) for row in verdict.as_dict()["decisions"])
    return out


def _judged_by(tree: Path, cases: list[str]) -> dict[str, list[str]]:
    """`decisions` in a process importing `tree`'s fleetops: this file's seeds, that tree's code and policies."""
    script = ("import importlib.util, json, pathlib, sys\n"
              f"sys.path[:0] = [{str(tree)!r}]\n"
              f"found = importlib.util.spec_from_file_location('same_decisions', {__file__!r})\n"
              "s = importlib.util.module_from_spec(found); found.loader.exec_module(s)\n"
              f"s.ROOT = pathlib.Path({str(tree)!r})\n"
              f"print(json.dumps(s.decisions({cases!r})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{tree}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the tree to compare with (a folder holding fleetops/, policies/, environments/)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = parser.parse_args()
    cases = args.cases.split(",")
    mine, theirs = _judged_by(ROOT, cases), _judged_by(args.other.resolve(), cases)
    differ = 0
    for case in mine:
        same = mine[case] == theirs[case]
        differ += not same
        print(f"{case:16} {len(mine[case]):>6} decisions here, {len(theirs[case]):>6} there: {'same' if same else 'DIFFERENT'}")
        if not same:
            for line in sorted(set(mine[case]) ^ set(theirs[case]))[:5]:
                print(f"  {'here ' if line in mine[case] else 'there'} {line[:300]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
