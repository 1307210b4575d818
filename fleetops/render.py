"""environments/<env>.yaml -> the Kubernetes manifests of every cluster, as `pulumi up` would send them.

One program, two consumers. The stack program (`stacks/__main__.py`) registers the fleet's parts
with Pulumi; render walks the same parts directly (`modules.fleet.manifests`), without the SDK,
which made up ~92% of render time. `engine="pulumi"` runs the stack program itself under the SDK's
mocks (`fleetops.sdk_render`): tests prove both give byte-identical manifests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from fleetops import git, schema, spec
from fleetops.errors import Problem, RenderError
from fleetops.kube import apply_order, describe, key_of, object_key

if TYPE_CHECKING:
    from fleetops.sdk_render import Declared

ROOT = Path(__file__).resolve().parent.parent
STACK_PROGRAM = ROOT / "stacks" / "__main__.py"


@dataclass
class DesiredState:
    environment: str
    revision: str
    clusters: dict[str, list[dict[str, Any]]]
    resources: int  # every resource the program registered: objects, providers and components

    def objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for cluster, manifests in self.clusters.items():
            for manifest in manifests:
                yield cluster, manifest

    @property
    def object_count(self) -> int:
        return sum(len(m) for m in self.clusters.values())


Each = Callable[[str, list[dict[str, Any]]], None]  # (cluster, its objects), as each cluster is done


def render(env_file: str | Path, revision: str | None = None, display: str | None = None,
           engine: str = "direct", program: Path = STACK_PROGRAM, each_cluster: Each | None = None) -> DesiredState:
    """environments/<env>.yaml -> the manifests of every cluster, validated against engine rules.

    engine "direct" walks the fleet's parts; "pulumi" runs `program` under the SDK's mocks.
    """
    env = spec.load_environment(env_file, display=display)  # fail on bad input before any other work
    return render_environment(env, env_file, revision, engine, program, each_cluster, display=display)


def render_environment(env: spec.Environment, env_file: str | Path, revision: str | None = None,
                       engine: str = "direct", program: Path = STACK_PROGRAM, each_cluster: Each | None = None,
                       display: str | None = None) -> DesiredState:
    """`render` of an environment already loaded from `env_file` (named `display` in errors). `each_cluster(cluster, objects)`
    is called with each cluster's checked and sorted objects as soon as they are (the direct walk:
    before the next cluster is built), so that writing them can overlap with rendering the rest."""
    revision = revision or git.revision(Path(env_file).resolve().parent)
    rendered = 0

    def finish(cluster: str, manifests: list[dict[str, Any]]) -> None:
        nonlocal rendered
        rendered += len(manifests)
        check_object_count(rendered, display or str(env_file), f"by cluster {cluster}")  # as each cluster is done: the render stops before the rest is built
        seen: set[tuple[str, str, str, str, str]] = set()
        for manifest in manifests:
            key = object_key(cluster, manifest)
            if key in seen:
                raise RenderError(f"{cluster} declares {key[2]} {key[3] + '/' if key[3] else ''}{key[4]} twice")
            seen.add(key)
        manifests.sort(key=apply_order)
        if each_cluster is not None:
            each_cluster(cluster, manifests)

    if engine == "pulumi":
        from fleetops import sdk_render

        config = {"environment": env.environment, "specFile": str(env_file), "revision": revision}
        clusters, resources, declared = sdk_render.collect(program, config, env.environment, [c.name for c in env.clusters])
        for cluster, manifests in clusters.items():
            check_declared_order(program, cluster, manifests, declared)
            finish(cluster, manifests)
    elif engine == "direct":
        from modules import fleet

        try:
            collected = fleet.manifests(env, finish)
        except fleet.CompositionError as exc:
            raise RenderError(f"{STACK_PROGRAM.parent.parent / 'modules'}: {exc}") from None
        clusters, resources = collected.clusters, collected.resources
    else:
        raise ValueError(f"unknown render engine {engine!r}")
    return DesiredState(environment=env.environment, revision=revision, clusters=clusters, resources=resources)


def check_declared_order(program: Path, cluster: str, manifests: list[dict[str, Any]], declared: Declared) -> None:
    """Every object the program registers waits for its prerequisites (modules.kube.prerequisites) that
    the fleet declares too: the engine creates in parallel whatever waits for nothing, and a tenant's
    objects created before their Namespace fail the first `pulumi up` (issue 42). RenderError naming
    the first object that does not wait, by sort."""
    from modules.kube import prerequisites

    keys = {key_of(m) for m in manifests}
    missing = sorted((describe(key_of(m)), describe(need)) for m in manifests for need in prerequisites(m)
                     if need in keys and need not in declared.get((cluster, key_of(m)), set()))
    if missing:
        what, need = missing[0]
        raise RenderError(f"{program}: {cluster}'s {what} is registered without depends_on its {need}: the engine may create it "
                          f"first and the API server refuses it ({len(missing)} such objects)")


def check_object_count(count: int, display: str, where: str = "in all") -> None:
    """No more objects than one environment may render (spec.LIMITS.objects): RenderError naming the
    file as `display` and how many were counted `where` ("by cluster X" as render goes, "in all")."""
    if count > spec.LIMITS.objects:
        raise RenderError(f"{display}: renders more than {spec.LIMITS.objects:,} objects, the limit for one environment "
                          f"(fleetops.spec.LIMITS); {count:,} {where}")


class Checked(NamedTuple):
    """An environment file that every command may act on: valid, rendered, and every object valid
    against its schema (what the API server will accept)."""

    document: spec.Document
    state: DesiredState

    @property
    def env(self) -> spec.Environment:
        return self.document.env


def load_checked(path: Path, display: str | None = None, revision: str | None = None, engine: str = "direct",
                 each_cluster: Each | None = None) -> Checked:
    """The one validation of an environment file that validate, render, check, audit, plan and reconcile
    share, so that each refuses exactly what the others refuse: read (bounded) and validate the file,
    render it, and check every object against its schema.

    Raises spec.SpecError (the file is invalid, too large, or renders objects the API server would
    refuse: one line per problem, naming the file as `display`) or RenderError (the program failed)."""
    display = display or str(path)
    document = spec.read_environment(path, display=display)
    state = render_environment(document.env, path, revision=revision, engine=engine, each_cluster=each_cluster, display=display)
    check_schemas(state.objects(), display)
    return Checked(document, state)


def check_schemas(objects: Iterable[tuple[str, dict[str, Any]]], display: str) -> None:
    """Every (cluster, object) against its schema and the API server's limits on its size, name and
    labels (`schema.limit_problems`), as the API server would judge it; spec.SpecError with one line per
    problem, naming the environment file as `display`."""
    listed = list(objects)
    problems = [f"rendered object fails its schema: {p}" for p in schema.validate_objects(listed)]
    problems += [f"rendered object is refused by the API server: {p}" for p in schema.limit_problems(listed)]
    if problems:
        raise spec.SpecError([Problem(p, display) for p in problems])
