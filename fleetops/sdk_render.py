"""Render under the Pulumi SDK's mock monitor: the stack program itself, run without an engine.

`fleetops render --engine pulumi` and the equivalence tests use it to prove that the direct render
(`modules.fleet.manifests`) sends exactly what `pulumi up` sends. The mock monitor accepts what the
real engine rejects, so this checks the engine's rules itself: unique URNs and unique objects per cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import runpy
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi.resource as pulumi_resource_api
from google.protobuf import struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime import rpc as pulumi_rpc
from pulumi.runtime import stack as pulumi_stack
from pulumi.runtime.proto import resource_pb2, source_pb2
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from fleetops import spec
from fleetops.errors import RenderError

PROVIDER_TYPE = "pulumi:providers:kubernetes"


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
    if kind is Unknown:
        raise _UnknownInput
    return value


class _UnknownInput(Exception):
    """An input that depends on another resource's output: a value render cannot know."""


@dataclass
class _Recorder(pulumi.runtime.Mocks):
    objects: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    providers: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # objects with an input known only after deployment
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

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
        # down, never Outputs up), and echoing the inputs back made the monitor serialise every
        # manifest a second time.
        return f"{args.name}-id", {}

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


class _Monitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, plus the URN uniqueness check the real engine makes.

    RegisterResource is the SDK's own, except that it sends back an empty object instead of
    serialising the mock's outputs with `_sync_await`: the recorder has no outputs, and `_sync_await`
    would pump the event loop re-entrantly now that the monitor runs on the loop's thread. It passes
    no transforms to the mocks, which the recorder does not use.
    """

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.duplicate_urns: list[str] = []

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        if urn in self.resources:
            self.duplicate_urns.append(urn)
        args = pulumi.runtime.MockResourceArgs(
            typ=request.type,
            name=request.name,
            inputs=pulumi_rpc.deserialize_properties(request.object),
            provider=request.provider,
            resource_id=request.importId,
            custom=request.custom or False,
        )
        id_, state = self.mocks.new_resource(args)
        if state:
            raise RenderError(f"the render mocks return no outputs, got some for {urn}")
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, id_, state)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=struct_pb2.Struct())


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


def _run_inline(loop: asyncio.AbstractEventLoop) -> Callable[..., asyncio.Future[Any]]:
    """A `loop.run_in_executor` that calls the function at once, on the loop's own thread.

    The SDK sends every RPC through the loop's thread pool because a real monitor is a blocking gRPC
    call. The mock monitor is an in-process function that returns at once, so each hop to a worker
    thread and back (plus the worker's own event loop for deserialising) was pure overhead.
    """

    def run_in_executor(executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future = loop.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting SDK code, as the pool would
            future.set_exception(exc)
        return future

    return run_in_executor


# Registrations queued before the event loop runs them. The SDK queues one coroutine (with its
# futures and Outputs) per resource and, left alone, runs none until the program ends: 12,900
# resources held at once peaked at ~780 MB; finishing them in batches keeps ~290 MB.
DRAIN_EVERY = 100


def _draining(register: Callable[..., None], loop: asyncio.AbstractEventLoop) -> Callable[..., None]:
    """`register_resource` that lets the queued registrations finish every DRAIN_EVERY resources.

    The order in which registrations complete does not change what each one sends, and render
    sorts the objects afterwards; the loop is only run from plain program code, never re-entered.
    """
    queued = 0

    def register_resource(*args: Any, **kwargs: Any) -> None:
        nonlocal queued
        register(*args, **kwargs)
        queued += 1
        if queued >= DRAIN_EVERY and not loop.is_running():
            queued = 0
            loop.run_until_complete(pulumi_stack.wait_for_rpcs(await_all_outstanding_tasks=False))

    return register_resource


@contextlib.contextmanager
def _fast_registration() -> Iterator[None]:
    """SDK settings that matter only to a real engine, turned off for the length of a render.

    Source positions feed the engine's diagnostics and the mock monitor drops them, yet capturing
    them walks the Python stack for every resource (~30% of registration time). The SDK leaves
    reference cycles behind every resource (~60% of each young generation is cyclic garbage), so
    collection cannot be turned off (+110 MB at 12,900 resources); a young generation of 20,000
    objects was fastest when measured (default 700: 21 s; 100,000: 14.4 s; 20,000: 11.5 s).
    RPCs run inline (`_run_inline`) and queued registrations finish in batches (`_draining`).
    Everything is restored on the way out, so a later `pulumi up` in the same process is untouched.
    """
    original = pulumi_resource._get_stack_trace
    was_enabled = gc.isenabled()
    pulumi_resource._get_stack_trace = _no_stack_trace
    loop = _ensure_event_loop()
    loop.run_in_executor = _run_inline(loop)  # type: ignore[method-assign]
    register = pulumi_resource_api.register_resource
    pulumi_resource_api.register_resource = _draining(register, loop)
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(20_000, 20, 1000)
    try:
        yield
    finally:
        pulumi_resource._get_stack_trace = original
        del loop.run_in_executor  # back to the class's method
        pulumi_resource_api.register_resource = register
        gc.set_threshold(*threshold)
        gc.unfreeze()
        if not was_enabled:
            gc.disable()


def run_program(program: Path, config: dict[str, str], stack: str) -> tuple[_Recorder, _Monitor]:
    """Run a Pulumi program file afresh under mocks and wait for every registration.

    As a preview by default: what `pulumi preview` sends is what `pulumi up` sends for every input
    that is plain data (the recorder refuses any that is not), and in a preview the SDK does not copy
    each input back into an Output, which nothing here reads (~20% of render time).
    """
    recorder = _Recorder()
    monitor = _Monitor(recorder)
    pulumi_settings.set_root_resource(None)
    pulumi.runtime.set_mocks(recorder, project="fleetops", stack=stack, preview=True, monitor=monitor)
    pulumi.runtime.set_all_config({k if ":" in k else f"fleetops:{k}": v for k, v in config.items()})
    with _fast_registration():
        try:
            runpy.run_path(str(program), run_name="__main__")
            _sync_await(pulumi_stack.wait_for_rpcs())
        except spec.SpecError:
            raise
        except Exception as exc:  # the program is user code: report what it raised, not a traceback
            raise RenderError(f"{program}: the stack program failed: {type(exc).__name__}: {exc}") from exc
    return recorder, monitor




def collect(program: Path, config: dict[str, str], stack: str, clusters: list[str]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The objects the program declares by cluster, and how many resources it registered."""
    recorder, monitor = run_program(program, config, stack)
    if recorder.unknown:
        raise RenderError(f"{program}: {recorder.unknown[0]} has an input known only after deployment (an Output of another resource); render shows plain data only")
    if monitor.duplicate_urns:
        raise RenderError(f"{program}: two resources share the URN {monitor.duplicate_urns[0]}")
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in clusters}
    for name, provider, manifest in recorder.objects:
        cluster = provider.rsplit("::", 1)[-1]
        if cluster not in out:
            raise RenderError(f"{program}: resource {name!r} is not bound to a cluster provider")
        out[cluster].append(manifest)
    return out, recorder.count
