"""What a change does: base vs head rendered in isolation, diffed, costed and judged by the base's policies.

Each side is taken from its own revision with `git archive` into a temporary folder (the user's
working tree and index are never touched; head defaults to the working tree itself, read only)
and rendered by that revision's own program and modules in a subprocess, so a change to
`modules/` shows up in the plan exactly as `pulumi up` would deploy it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import diff, git, spec

WORKTREE = "WORKTREE"

# Runs inside the revision's own tree: its fleetops.render drives its stacks/__main__.py.
_RENDER_SNIPPET = """
import json, sys
from fleetops import render, spec
try:
    state = render.render(sys.argv[1], revision=sys.argv[2], display=sys.argv[3])
except spec.SpecError as exc:
    print(json.dumps({"problems": exc.problems})); sys.exit(0)
except render.RenderError as exc:
    print(json.dumps({"problems": [str(exc)]})); sys.exit(0)
print(json.dumps({"clusters": state.clusters, "resources": state.resources}))
"""


class PlanError(Exception):
    """Bad input: an unknown revision, an invalid environment at head, a side that cannot render."""


@dataclass
class Side:
    """One revision of the environment, rendered: empty when the file does not exist there."""

    revision: str
    exists: bool
    env: spec.Environment | None = None
    objects: dict[diff.ObjectKey, dict[str, Any]] = field(default_factory=dict)
    tree: Path | None = None


def resolve(repo: Path, rev: str) -> str:
    if rev == WORKTREE:
        return WORKTREE
    try:
        return git.run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except git.GitError:
        raise PlanError(f"{repo}: unknown revision {rev!r}") from None


def default_base(repo: Path, head: str = "HEAD") -> str:
    """The merge-base of the head (HEAD for the working tree) with the default branch (origin's HEAD, else main or master)."""
    candidates = []
    with contextlib.suppress(git.GitError):
        candidates.append(git.run(repo, "symbolic-ref", "--short", "refs/remotes/origin/HEAD").strip())
    candidates += ["origin/main", "main", "origin/master", "master"]
    for branch in candidates:
        try:
            return git.run(repo, "merge-base", head, branch).strip()
        except git.GitError:
            continue
    raise PlanError(f"{repo}: no default branch to compare with; pass --base")


def _files_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    # Links are skipped, not followed: a revision's tree is data, and nothing fleetops renders is a link.
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


@contextlib.contextmanager
def checkout(repo: Path, rev: str) -> Iterator[Path]:
    """A read-only copy of the tree at `rev` in a temporary folder, removed afterwards."""
    if rev == WORKTREE:
        yield repo
        return
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True, check=False)
    if archive.returncode != 0:
        raise PlanError(f"{repo}: cannot read revision {rev}: {archive.stderr.decode(errors='replace').strip()}")
    with tempfile.TemporaryDirectory(prefix="fleetops-plan-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout), mode="r:") as tar:
            tar.extractall(tmp, filter=_files_only)
        yield Path(tmp)


def _start_render(tree: Path, env_rel: str, revision: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.Popen(
        [sys.executable, "-c", _RENDER_SNIPPET, str(tree / env_rel), revision, env_rel],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish_render(proc: subprocess.Popen[str], label: str) -> dict[str, Any]:
    stdout, stderr = proc.communicate()
    try:
        result = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    if proc.returncode != 0 or result is None:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise PlanError(f"{label}: the revision's program could not be rendered: {last}")
    return result


def render_sides(repo: Path, env_rel: str, revs: tuple[str, str], trees: tuple[Path, Path]) -> tuple[Side, Side]:
    """Render base and head side by side (two processes: one per core)."""
    sides = []
    procs = []
    for rev, tree in zip(revs, trees):
        exists = (tree / env_rel).is_file()
        label = f"{env_rel}@{rev[:12] if rev != WORKTREE else 'working tree'}"
        procs.append((exists, label, _start_render(tree, env_rel, stamp(repo, rev)) if exists else None))
    try:
        for (exists, label, proc), rev, tree in zip(procs, revs, trees):
            sides.append(_side(rev, exists, tree, env_rel, _finish_render(proc, label) if proc is not None else None))
    finally:
        for _, _, proc in procs:  # a side that failed leaves the other nothing to do
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return sides[0], sides[1]


def _side(rev: str, exists: bool, tree: Path, env_rel: str, result: dict[str, Any] | None) -> Side:
    side = Side(revision=rev, exists=exists, tree=tree)
    if result is None:
        return side
    if "problems" in result:
        raise PlanError("\n".join(result["problems"]))
    side.objects = {
        (c, m["apiVersion"], m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]): m
        for c, manifests in result["clusters"].items()
        for m in manifests
    }
    side.env = _facts_model(tree / env_rel, env_rel)
    return side


def stamp(repo: Path, rev: str) -> str:
    return git.revision(repo) if rev == WORKTREE else rev


def _facts_model(path: Path, display: str) -> spec.Environment | None:
    # Capacity and cost facts come from the current model; a base written for an older model may not load.
    try:
        return spec.load_environment(path, display=display)
    except spec.SpecError:
        return None


# --- what changed ---------------------------------------------------------------------------


def capacity_rows(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    """Per cluster x device resource: declared units, guaranteed and burst sums, headroom, before and after."""

    def facts(env: spec.Environment | None) -> dict[tuple[str, str], dict[str, float]]:
        rows = spec.capacity_rows(env) if env is not None else []
        return {
            (r["cluster"], r["resource"]): {"devices": r["capacity"], "guaranteed": r["guaranteed"], "burst": r["burst"], "headroom_percent": r["headroom_percent"]}
            for r in rows
        }

    b, a = facts(before), facts(after)
    empty = {"devices": 0, "guaranteed": 0, "burst": 0, "headroom_percent": 0.0}
    return [
        {"cluster": key[0], "resource": key[1], "before": b.get(key, empty), "after": a.get(key, empty)}
        for key in sorted(set(b) | set(a))
    ]


def quota_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    def quotas(env: spec.Environment | None) -> dict[tuple[str, str, str], dict[str, int]]:
        if env is None:
            return {}
        return {
            (t.name, c, r): {"guaranteed": q.guaranteed, "burst": q.burst}
            for t in env.tenants
            for c in t.clusters
            for r, q in t.quota.items()
        }

    b, a = quotas(before), quotas(after)
    zero = {"guaranteed": 0, "burst": 0}
    rows = []
    for key in sorted(set(b) | set(a)):
        old, new = b.get(key, zero), a.get(key, zero)
        if old != new:
            rows.append({"tenant": key[0], "cluster": key[1], "resource": key[2], "before": old, "after": new})
    return rows


def group_changes(before: spec.Environment | None, after: spec.Environment | None) -> dict[str, list[str]]:
    def groups(env: spec.Environment | None) -> set[str]:
        if env is None:
            return set()
        return {f"{c.name}/{g.name}" for c in env.clusters for g in (*c.pools, *c.edge_groups)}

    b, a = groups(before), groups(after)
    return {"added": sorted(a - b), "removed": sorted(b - a)}


def changed_policy_files(repo: Path, base: str, head: str) -> list[str]:
    args = ["diff", "--name-only", base] + ([] if head == WORKTREE else [head]) + ["--", "policies/"]
    files = set(git.run(repo, *args).split())
    if head == WORKTREE:
        files |= set(git.run(repo, "ls-files", "--others", "--exclude-standard", "--", "policies/").split())
    return sorted(files)


def policy_owners(tree: Path) -> list[str]:
    path = tree / "policies" / "owners.yaml"
    if not path.is_file():
        return []
    data, _ = spec.parse_yaml(path.read_text(), str(path))
    owners = data.get("owners", []) if isinstance(data, dict) else []
    return [str(o) for o in owners]


def cost(env: spec.Environment | None) -> float:
    return spec.monthly_cost(env) if env is not None else 0.0


# --- the plan ---------------------------------------------------------------------------------

Judge = Callable[[spec.Environment | None, dict[diff.ObjectKey, dict[str, Any]], dict[str, Any], Path], list[dict[str, Any]]]


def _key_dict(key: diff.ObjectKey) -> dict[str, str]:
    return dict(zip(("cluster", "apiVersion", "kind", "namespace", "name"), key))


def change_facts(environment: str, base: Side, head: Side, quota: list[dict[str, Any]], groups: dict[str, list[str]], policy_files: list[str], approvals: int) -> dict[str, Any]:
    """The change under review, as the `fleet.change` policies see it."""
    return {
        "environment": environment,
        "base_revision": base.revision,
        "head_revision": head.revision,
        "environment_added": not base.exists and head.exists,
        "environment_removed": base.exists and not head.exists,
        "quota_changes": quota,
        "groups_added": groups["added"],
        "groups_removed": groups["removed"],
        "cost_before": cost(base.env),
        "cost_after": cost(head.env),
        "policy_files_changed": policy_files,
        "approvals": approvals,
    }


def build(repo: Path, env_name: str, base_rev: str | None, head_rev: str | None, approvals: int, judge: Judge) -> dict[str, Any]:
    """Render both sides, compare them, and judge head (and the change) by the base revision's policies."""
    env_rel = f"environments/{env_name}.yaml"
    head = resolve(repo, head_rev) if head_rev else WORKTREE
    base = resolve(repo, base_rev) if base_rev else default_base(repo, "HEAD" if head == WORKTREE else head)
    with checkout(repo, base) as base_tree, checkout(repo, head) as head_tree:
        before, after = render_sides(repo, env_rel, (base, head), (base_tree, head_tree))
        if not before.exists and not after.exists:
            raise PlanError(f"{env_rel}: no such environment at base {base[:12]} or head")
        changes = diff.compare(before.objects, after.objects)
        quota = quota_changes(before.env, after.env)
        groups = group_changes(before.env, after.env)
        policy_files = changed_policy_files(repo, base, head)
        facts = change_facts(env_name, before, after, quota, groups, policy_files, approvals)
        # The base revision's policies judge the change: a pull request cannot weaken its own gate.
        policies = base_tree / "policies" if (base_tree / "policies").is_dir() else head_tree / "policies"
        decisions = judge(after.env, after.objects, facts, policies)
        owners = policy_owners(base_tree) or policy_owners(head_tree)
    currency = (after.env or before.env).budget.currency if (after.env or before.env) else ""
    counts = {s: sum(1 for d in decisions if d["status"] == s) for s in ("deny", "warn", "waived")}
    return {
        "environment": env_name,
        "base": {"revision": base, "exists": before.exists},
        "head": {"revision": head if head != WORKTREE else stamp(repo, head), "exists": after.exists},
        "verdict": "denied" if counts["deny"] else "allowed",
        "no_effect": changes.empty and not policy_files and cost(before.env) == cost(after.env),
        "objects": {
            "added": [_key_dict(k) for k in changes.added],
            "removed": [_key_dict(k) for k in changes.removed],
            "changed": [{**_key_dict(k), "fields": [f.to_dict() for f in fs]} for k, fs in changes.changed.items()],
            "per_cluster": _per_cluster(changes),
        },
        "capacity": capacity_rows(before.env, after.env),
        "quota_changes": quota,
        "groups": groups,
        "cost": {"before": cost(before.env), "after": cost(after.env), "delta": round(cost(after.env) - cost(before.env), 2), "currency": currency},
        "policy": {
            "judged_by": base,
            "policy_files_changed": policy_files,
            "owners": owners,
            "needs_policy_owner_review": bool(policy_files),
        },
        "decisions": decisions,
        "counts": counts,
    }


def _per_cluster(changes: diff.Changes) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for what, keys in (("added", changes.added), ("removed", changes.removed), ("changed", list(changes.changed))):
        for key in keys:
            slot = out.setdefault(key[0], {"added": 0, "removed": 0, "changed": 0})
            slot[what] += 1
    return dict(sorted(out.items()))


# --- report formats ---------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _signed(value: float) -> str:
    return ("+" if value > 0 else "") + _num(value)


def _arrow(before: Any, after: Any) -> str:
    return f"{before}" if before == after else f"{before} → {after}"


def markdown(plan: dict[str, Any]) -> str:
    """A pull-request comment: the verdict and the numbers first, the details folded."""
    c, n = plan["cost"], plan["counts"]
    objs = plan["objects"]
    icon = "❌ denied" if plan["verdict"] == "denied" else "✅ allowed"
    base = plan["base"]["revision"][:12]
    lines = [
        f"### fleetops plan `{plan['environment']}`: {icon}",
        "",
        f"**Monthly cost** {_num(c['before'])} → {_num(c['after'])} {c['currency']} (**{_signed(c['delta'])}**) · "
        f"**Objects** +{len(objs['added'])} ~{len(objs['changed'])} −{len(objs['removed'])} · "
        f"**Decisions** {n['deny']} deny, {n['warn']} warn, {n['waived']} waived",
        "",
        f"Judged by the policies of the base revision `{base}`.",
    ]
    if not plan["head"]["exists"]:
        lines += ["", f"> ⚠️ This change deletes `environments/{plan['environment']}.yaml`: every object below is removed."]
    if plan["policy"]["needs_policy_owner_review"]:
        owners = ", ".join(plan["policy"]["owners"]) or "(no policies/owners.yaml)"
        files = ", ".join(f"`{f}`" for f in plan["policy"]["policy_files_changed"])
        lines += ["", f"> ⚠️ **Policy change** ({files}): needs review by the policy owners: {owners}. It takes effect only after merge."]
    moved = [r for r in plan["capacity"] if r["before"] != r["after"]]
    if moved:
        lines += ["", "| cluster | resource | devices | guaranteed | burst | headroom % |", "|---|---|---:|---:|---:|---:|"]
        for r in moved:
            b, a = r["before"], r["after"]
            lines.append(
                f"| {r['cluster']} | `{r['resource']}` | {_arrow(b['devices'], a['devices'])} | {_arrow(b['guaranteed'], a['guaranteed'])} "
                f"| {_arrow(b['burst'], a['burst'])} | {_arrow(b['headroom_percent'], a['headroom_percent'])} |"
            )
    blocking = [d for d in plan["decisions"] if d["status"] == "deny"]
    if blocking:
        lines += ["", "**Denied by**:"] + [f"- `{d['rule']}` {d['msg']}" for d in blocking]
    lines += _details(f"Policy decisions ({len(plan['decisions'])})", _decision_table(plan["decisions"]))
    if plan["quota_changes"]:
        rows = ["| tenant | cluster | resource | guaranteed | burst |", "|---|---|---|---:|---:|"] + [
            f"| {q['tenant']} | {q['cluster']} | `{q['resource']}` | {_arrow(q['before']['guaranteed'], q['after']['guaranteed'])} | {_arrow(q['before']['burst'], q['after']['burst'])} |"
            for q in plan["quota_changes"]
        ]
        lines += _details(f"Quota changes ({len(plan['quota_changes'])})", rows)
    lines += _details(f"Objects (+{len(objs['added'])} ~{len(objs['changed'])} −{len(objs['removed'])})", _object_lines(objs))
    lines += _details("Capacity per cluster and device resource", _capacity_table(plan["capacity"]))
    return "\n".join(lines) + "\n"


def _details(summary: str, body: list[str]) -> list[str]:
    if not body:
        return []
    return ["", f"<details><summary>{summary}</summary>", "", *body, "", "</details>"]


def _decision_table(decisions: list[dict[str, Any]]) -> list[str]:
    if not decisions:
        return []
    rows = ["| status | rule | severity | resource | message |", "|---|---|---|---|---|"]
    for d in decisions:
        msg = str(d["msg"]).replace("|", "\\|")
        rows.append(f"| {d['status']} | `{d['rule']}` | {d.get('severity', '')} | {d.get('resource') or ''} | {msg} |")
    return rows


def _object_lines(objs: dict[str, Any]) -> list[str]:
    def name(o: dict[str, Any]) -> str:
        ns = f"{o['namespace']}/" if o["namespace"] else ""
        return f"{o['cluster']}: {o['kind']} {ns}{o['name']}"

    lines = [f"+ {name(o)}" for o in objs["added"]] + [f"- {name(o)}" for o in objs["removed"]]
    for o in objs["changed"]:
        lines.append(f"~ {name(o)}")
        lines += [f"    {f['op']} {f['path']}: {json.dumps(f['old'])} → {json.dumps(f['new'])}" for f in o["fields"]]
    return ["```diff", *lines, "```"] if lines else []


def _capacity_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| cluster | resource | devices | guaranteed | burst | headroom % |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        a = r["after"]
        out.append(f"| {r['cluster']} | `{r['resource']}` | {a['devices']} | {a['guaranteed']} | {a['burst']} | {a['headroom_percent']} |")
    return out


def junit(plan: dict[str, Any]) -> str:
    from fleetops import policy

    return policy.junit_report(f"fleetops plan {plan['environment']}", f"fleetops.plan.{plan['environment']}", plan["decisions"])


def judge(
    env: spec.Environment | None,
    objects: dict[diff.ObjectKey, dict[str, Any]],
    facts: dict[str, Any],
    policies: Path,
) -> list[dict[str, Any]]:
    """Head's fleet and the change itself, judged by the policies and data in `policies` (the base's)."""
    from fleetops import policy

    resources = (policy.resource_entry(key[0], manifest) for key, manifest in objects.items())
    if env is not None:
        document = policy.build_input(env, resources, facts["head_revision"], change=facts)
    else:  # the environment is deleted at head: only the change rules have anything to judge
        document = {"environment": facts["environment"], "revision": facts["head_revision"], "spec": None,
                    "resources": [], "facts": None, "live": None, "change": facts}
    try:
        verdict = policy.evaluate_input(document, engine=policy.engine_from(), policies_dir=policies)
    except policy.PolicyError as exc:
        raise PlanError(f"policy gate (fail closed): {exc}") from None
    return policy.report_rows(verdict) + [
        {"status": "warn", "rule": "waiver.invalid", "severity": "low", "msg": problem, "resource": "", "waived_by": None}
        for problem in verdict.waiver_problems
    ]
