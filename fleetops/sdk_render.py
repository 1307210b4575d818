"""Render under the Pulumi SDK's mocks: the stack program itself, run without an engine.

`fleetops render --engine pulumi` and the equivalence tests use it to prove that the direct render
(`modules.fleet.manifests`) sends exactly what `pulumi up` sends. It runs the program as the SDK's
unit-testing guide does (`pulumi.runtime.set_mocks` with a `Mocks` subclass, `pulumi.runtime.test`)
and patches nothing in the SDK, so that a Pulumi upgrade changes this render only where it changes
what a program sends. The mock monitor accepts what the real engine rejects, so this checks the
engine's rules itself: unique URNs and unique objects per cluster.
"""

from __future__ import annotations

import runpy
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor

from fleetops import spec
from fleetops.errors import RenderError
from fleetops.kube import Key, key_of

PROVIDER_TYPE = "pulumi:providers:kubernetes"
# What an input known only after deployment (another resource's output) deserialises to in a preview.
UNKNOWN_TYPE = type(pulumi.UNKNOWN)


def _plain(value: Any) -> Any:
    # Inputs travel through protobuf Struct, where every number is a double: give integers back.
    # Exact type checks: this walks every field of every manifest, and isinstance costs more.
    kind = type(value)
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if kind is float and value.is_integer():
        return int(value)
    if kind is UNKNOWN_TYPE:
        raise _UnknownInput
    return value


class _UnknownInput(Exception):
    """An input that depends on another resource's output: a value render cannot know."""


@dataclass
class _Recorder(pulumi.runtime.Mocks):
    objects: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # objects with an input known only after deployment
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # the SDK calls the mocks from its thread pool

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]:
        with self.lock:
            self.count += 1
            if args.typ == PROVIDER_TYPE:
                return args.name, {}
            if args.custom and args.typ.startswith("kubernetes:"):
                try:
                    self.objects.append((args.name, args.provider or "", _plain(args.inputs)))
                except _UnknownInput:
                    self.unknown.append(args.name)
        # No outputs: the program never reads a resource's outputs (components pass plain manifests
        # down, never Outputs up), and echoing the inputs back would serialise every manifest twice.
        return f"{args.name}-id", {}

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


class _Monitor(MockMonitor):
    """The SDK's mock monitor, plus the URN uniqueness check the real engine makes, and what each
    resource was declared to depend on (the engine creates in parallel what depends on nothing).

    The one reach past the documented mocks (`set_mocks`' `monitor` argument, the SDK's own class):
    `Mocks.new_resource` is told a resource's type and name but neither its parent nor its
    dependencies, so only the monitor knows its URN and what it waits for. RegisterResource is the
    engine protocol's method, left to the SDK after the check; tests/render/test_sdk_render.py fails if the
    SDK stops calling it.
    """

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.duplicate_urns: list[str] = []
        self.registered: dict[str, tuple[str, tuple[str, ...]]] = {}  # URN -> (name, the URNs it depends on)
        self.lock = threading.Lock()  # registrations arrive on the SDK's thread pool: check and store as one step

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        urn = self.make_urn(request.parent, request.type, request.name)
        with self.lock:
            if urn in self.resources:
                self.duplicate_urns.append(urn)
            self.registered[urn] = (request.name, tuple(request.dependencies))
            return super().RegisterResource(request)

    def depends_on(self, objects: list[tuple[str, str, dict[str, Any]]]) -> dict[tuple[str, str], set[Key]]:
        """Each Kubernetes object (its resource name and kind) -> the objects (keys) it was registered to wait for.
        By name and kind, not by name alone: a Deployment and its ServiceAccount share a name (kube.object_name),
        and keyed by name whichever registered last, in the SDK's thread pool's order, stood for both."""
        kind = lambda urn: urn.rsplit("::", 2)[-2].rsplit(":", 1)[-1]  # noqa: E731 - urn:...::<parent$>kubernetes:<group/version>:<Kind>::<name>
        key_by_urn: dict[str, Key] = {}
        names = {(name, manifest["kind"]): key_of(manifest) for name, _, manifest in objects}
        for urn, (name, _) in self.registered.items():
            if (name, kind(urn)) in names:
                key_by_urn[urn] = names[(name, kind(urn))]
        return {(name, kind(urn)): {key_by_urn[d] for d in deps if d in key_by_urn} for urn, (name, deps) in self.registered.items() if urn in key_by_urn}


def run_program(program: Path, config: dict[str, str], stack: str) -> tuple[_Recorder, _Monitor]:
    """Run a Pulumi program file afresh under mocks and wait for every registration.

    As a preview: what `pulumi preview` sends is what `pulumi up` sends for every input that is plain
    data (the recorder refuses any that is not), and in a preview the SDK does not copy each input
    back into an Output, which nothing here reads.
    """
    recorder = _Recorder()
    monitor = _Monitor(recorder)
    pulumi.runtime.reset_options(project="fleetops", stack=stack, preview=True)  # no root stack left from a run before
    pulumi.runtime.set_mocks(recorder, project="fleetops", stack=stack, preview=True, monitor=monitor)
    pulumi.runtime.set_all_config({k if ":" in k else f"fleetops:{k}": v for k, v in config.items()})

    @pulumi.runtime.test  # runs the program, then waits for every registration it queued
    def run() -> None:
        runpy.run_path(str(program), run_name="__main__")

    try:
        run()
    except spec.SpecError:
        raise
    except Exception as exc:  # the program is user code: report what it raised, not a traceback
        raise RenderError(f"{program}: the stack program failed: {type(exc).__name__}: {exc}") from exc
    return recorder, monitor


Declared = dict[tuple[str, Key], set[Key]]  # (cluster, object) -> the objects of its cluster it waits for


def collect(program: Path, config: dict[str, str], stack: str, clusters: list[str]) -> tuple[dict[str, list[dict[str, Any]]], int, Declared]:
    """The objects the program declares by cluster, how many resources it registered, and what each
    object was declared to depend on."""
    recorder, monitor = run_program(program, config, stack)
    # The SDK's thread pool registers in no fixed order: name the first problem by sort, the same every run.
    if recorder.unknown:
        raise RenderError(f"{program}: {min(recorder.unknown)} has an input known only after deployment (an Output of another resource); render shows plain data only")
    if monitor.duplicate_urns:
        raise RenderError(f"{program}: two resources share the URN {min(monitor.duplicate_urns)}")
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in clusters}
    placed = [(provider.rsplit("::", 1)[-1], name, manifest) for name, provider, manifest in recorder.objects]
    unbound = [name for cluster, name, _ in placed if cluster not in out]
    if unbound:
        raise RenderError(f"{program}: resource {min(unbound)!r} is not bound to a cluster provider")
    waits = monitor.depends_on(recorder.objects)
    declared: Declared = {}
    for cluster, name, manifest in placed:
        out[cluster].append(manifest)
        declared[(cluster, key_of(manifest))] = waits.get((name, manifest["kind"]), set())
    return out, recorder.count, declared
