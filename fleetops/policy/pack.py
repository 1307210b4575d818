"""The Pulumi policy pack's adapter: a stack's resources -> the policy input, decisions -> violations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fleetops import git, spec
from fleetops.errors import PolicyError
from fleetops.kube import ENVIRONMENT_LABEL
from fleetops.policy.engine import Engine
from fleetops.policy.facts import build_input, resource_entry
from fleetops.policy.verdict import Verdict, evaluate_input


def provider_cluster(provider: Any) -> str | None:
    """A pulumi_kubernetes provider resource is named after its cluster: `modules.program` names it after the cluster's part (`modules.fleet`)."""
    if provider is None:
        return None
    name = getattr(provider, "name", None)
    if name:
        return str(name)
    urn = getattr(provider, "urn", "") or ""
    return urn.rsplit("::", 1)[-1] or None


def plain(value: Any) -> Any:
    """Pulumi's policy SDK hands props as read-only mapping and sequence proxies: make them data."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def manifest_from_props(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """kubernetes:<group/version>:<Kind> props are the manifest; apiVersion and kind come from the type when absent.

    The server-set `status` is dropped: policies judge what Git declares.
    """
    _, api, kind = resource_type.split(":", 2)
    manifest = {k: v for k, v in plain(props).items() if k != "status"}
    manifest.setdefault("apiVersion", api.removeprefix("core/"))
    manifest.setdefault("kind", kind)
    return manifest


@dataclass(frozen=True)
class StackObject:
    entry: dict[str, Any]
    urn: str


def stack_objects(resources: Iterable[Any]) -> tuple[list[StackObject], list[str]]:
    """Policy-input resources from Pulumi stack resources (PolicyResource-like: resource_type, props, provider, urn)."""
    out, problems = [], []
    for r in resources:
        if not r.resource_type.startswith("kubernetes:"):
            continue  # providers are pulumi:providers:kubernetes; components are fleetops:fleet:*
        cluster = provider_cluster(getattr(r, "provider", None))
        if cluster is None:
            problems.append(f"{r.urn}: no Kubernetes provider, so no cluster")
            continue
        manifest = manifest_from_props(r.resource_type, r.props)
        if not isinstance(manifest.get("metadata"), dict) or "name" not in manifest["metadata"]:
            problems.append(f"{r.urn}: manifest without metadata.name")
            continue
        out.append(StackObject(resource_entry(cluster, manifest), r.urn))
    return out, problems


def _stamp(objects: list[StackObject], where: str, key: str) -> set[str]:
    return {o.entry["manifest"]["metadata"].get(where, {}).get(key) for o in objects} - {None}


def stack_input(resources: Iterable[Any], environments: Path) -> tuple[dict[str, Any], list[StackObject]]:
    """A Pulumi stack's resources -> the same policy input `fleetops check` builds from a render.

    The environment is the one every object is stamped with (label fleetops.io/environment); its
    spec and derived facts come from that environment file in this checkout.
    """
    objects, problems = stack_objects(resources)
    if problems:
        raise PolicyError(problems[0])
    names = _stamp(objects, "labels", ENVIRONMENT_LABEL)
    if len(names) != 1:
        raise PolicyError(f"stack objects must carry one fleetops.io/environment label, found {sorted(names) or 'none'}")
    name = names.pop()
    try:
        env = spec.load_environment(spec.environment_path(name, environments))
    except spec.SpecError as exc:
        raise PolicyError(problems=exc.problems[:1]) from None
    # The pack runs in the checkout Pulumi deploys from: its commit is the revision under review.
    return build_input(env, (o.entry for o in objects), git.revision(environments.parent)), objects


def validate_stack(
    resources: Iterable[Any],
    report_violation: Any,
    kind: Literal["deny", "warn"],
    environments: Path,
    policies_dir: Path,
    engine: Engine | None = None,
) -> Verdict | None:
    """The Pulumi policy pack's stack validation: report each unwaived `kind` decision as a violation.

    No decision (bad stack, engine failure) is itself a violation of the deny policy: fail closed.
    """
    try:
        document, objects = stack_input(resources, environments)
        verdict = evaluate_input(document, engine, policies_dir)
    except PolicyError as exc:
        if kind == "deny":
            report_violation(f"fleetops policy gate could not decide: {exc}", None)
        return None
    urns = {(o.entry["cluster"], o.entry["kind"], o.entry["namespace"], o.entry["name"]): o.urn for o in objects}
    for d in verdict.decisions:
        if d.status == kind:
            r = d.resource
            urn = urns.get((r.get("cluster"), r.get("kind"), r.get("namespace", ""), r.get("name")))
            report_violation(f"[{d.rule}] {d.msg}", urn)
    return verdict
