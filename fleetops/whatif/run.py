"""A trace replayed on each side, cluster by cluster, each on a fresh kube-apiserver with the real Kueue."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetops.errors import WhatifError
from fleetops.whatif import servers
from fleetops.whatif.figures import SideFigures, side_figures
from fleetops.whatif.replay import Record, Replay, prepared
from fleetops.whatif.report import impact
from fleetops.whatif.sides import ReplaySide, SideKind, side_of
from fleetops.whatif.trace import Trace, read_csv

if TYPE_CHECKING:  # the plan's sides, as plan.Meter hands them over
    from fleetops import plan


@dataclass(frozen=True)
class ReplayOptions:
    root: Path | None = None  # where .tools/bin is looked for first
    keep: Path | None = None  # the servers' folders and logs stay here (default: a temporary folder, removed)
    port: Callable[[], int] = servers.any_free_port


def replay_side(side: ReplaySide, trace: Trace, etcd: servers.Etcd, folder: Path, options: ReplayOptions) -> dict[int, Record]:
    """Every job of the trace on `side`: one Kueue per cluster the jobs ask of, one after the other."""
    records: dict[int, Record] = {}
    for cluster in sorted({j.cluster for j in trace.jobs}):
        jobs = [j for j in trace.jobs if j.cluster == cluster]
        objects, roots, witnesses = prepared(side.clusters[cluster])
        with servers.kueue_cluster(etcd, folder / side.kind / cluster, objects, str(side.kind), options.root, port=options.port) as api:
            records.update(Replay(api.client(), jobs, side.submission, trace.window, roots, witnesses).run())
    return records


def replay(sides: list[ReplaySide], trace: Trace, options: ReplayOptions = ReplayOptions()) -> list[SideFigures]:
    """Each side's figures for `trace`, in the order given."""
    for name in ("etcd", "kube-apiserver", "kueue"):
        servers.tool(name, options.root)  # every server found before any starts
    out = []
    with (contextlib.nullcontext(str(options.keep)) if options.keep else tempfile.TemporaryDirectory(prefix="fleetops-whatif-")) as tmp:
        folder = Path(tmp)
        with servers.etcd_server(folder / "etcd", options.root, options.port) as etcd:
            for side in sides:
                records = replay_side(side, trace, etcd, folder, options)
                out.append(side_figures(str(side.kind), side.revision, side.env, trace, records))
    return out


def work(path: Path, options: ReplayOptions = ReplayOptions()) -> Callable[[plan.RenderedSide, plan.RenderedSide], dict[str, Any]]:
    """`plan --whatif`: what the plan's change does to the work of the CSV trace at `path`, replayed on the
    plan's own rendered base and head (`report.impact`, plain data for `plan.Meter.work`). The trace is
    read against head, as `fleetops whatif` reads it for base and head, so both commands give one trace
    the same figures."""
    def replayed(before: plan.RenderedSide, after: plan.RenderedSide) -> dict[str, Any]:
        both = []
        for kind, side in ((SideKind.BASE, before), (SideKind.HEAD, after)):
            if not side.exists or side.env is None:
                raise WhatifError(f"plan --whatif: the environment does not exist at {kind} {side.revision[:12]}: there is nothing to replay "
                                  f"{path} on (plan it without --whatif)")
            both.append(side_of(kind, side.revision, side.env, side.clusters))
        jobs = read_csv(path, both[1].env)
        base, head = replay(both, jobs, options)
        return impact(base, head, jobs)

    return replayed
