"""A trace replayed on each side, cluster by cluster, each on a fresh kube-apiserver with the real Kueue."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetops.whatif import servers
from fleetops.whatif.figures import SideFigures, side_figures
from fleetops.whatif.replay import Record, Replay, prepared
from fleetops.whatif.sides import Side
from fleetops.whatif.trace import Trace


@dataclass(frozen=True)
class Options:
    root: Path | None = None  # where .tools/bin is looked for first
    keep: Path | None = None  # the servers' folders and logs stay here (default: a temporary folder, removed)
    port: Callable[[], int] = servers.any_free_port


def replay_side(side: Side, trace: Trace, etcd: servers.Etcd, folder: Path, options: Options) -> dict[int, Record]:
    """Every job of the trace on `side`: one Kueue per cluster the jobs ask of, one after the other."""
    records: dict[int, Record] = {}
    for cluster in sorted({j.cluster for j in trace.jobs}):
        jobs = [j for j in trace.jobs if j.cluster == cluster]
        objects, roots, witnesses = prepared(side.clusters[cluster])
        with servers.kueue_cluster(etcd, folder / side.kind / cluster, objects, str(side.kind), options.root, port=options.port) as api:
            records.update(Replay(api.client(), jobs, side.submission, trace.window, roots, witnesses).run())
    return records


def replay(sides: list[Side], trace: Trace, options: Options = Options()) -> list[SideFigures]:
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
