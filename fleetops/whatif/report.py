"""The figures of every side, side by side: a table a person reads, and the JSON document in the one envelope."""

from __future__ import annotations

import dataclasses
from typing import Any

from fleetops.envelope import envelope
from fleetops.whatif.figures import SideFigures, Waits
from fleetops.whatif.trace import Trace

ASSUMPTIONS = (
    "simulated time on the real Kueue v0.17: jobs are Workloads submitted at their arrival and finished exactly their duration after "
    "admission; no pod runs, so node fit, images and start-up are not modelled",
    "a preempted job loses the work of its run and starts over when admitted again (no checkpoints)",
    "a job still waiting at the end of the window counts with the wait it has had so far",
)


def document(environment: str, trace: Trace, figures: list[SideFigures]) -> dict[str, Any]:
    def side(f: SideFigures) -> dict[str, Any]:
        out = dataclasses.asdict(f)
        for row, u in zip(out["utilisation"], f.utilisation):
            row["utilisation"] = round(u.utilisation, 4)
        out["preemptions_by_class"] = f.preemptions_by_class()
        return out

    return envelope("whatif", True, {"jobs": len(trace.jobs), "sides": len(figures)}, environment=environment,
                    revision=None, trace={"source": trace.source, "jobs": len(trace.jobs), "window_hours": trace.window / 3600},
                    assumptions=list(ASSUMPTIONS), sides=[side(f) for f in figures])


def _cells(w: Waits) -> str:
    return f"{w.p50:>7.2f} {w.p90:>7.2f} {w.p99:>7.2f} {w.over_an_hour:>7.1%}"


def table(environment: str, trace: Trace, figures: list[SideFigures]) -> str:
    names = [f.side for f in figures]
    width = max(12, *(len(n) for n in names))

    def row(label: str, values: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{v:>{width + 2}}" for v in values)

    lines = [f"whatif {environment}: {trace.source}; {len(trace.jobs)} jobs over {trace.window / 86400:g} days", "",
             row("", names),
             row("allocation utilisation", [f"{f.total_utilisation:.1%}" for f in figures]),
             row("offered load (the ceiling)", [f"{f.offered_load:.1%}" for f in figures]),
             row("backlog at the end (jobs)", [str(f.backlog_jobs) for f in figures]),
             row("backlog (device-hours asked)", [f"{f.backlog_device_hours:.0f}" for f in figures]),
             row("wait p50 / p99 (h)", [f"{f.waits_all.p50:.2f} / {f.waits_all.p99:.2f}" for f in figures]),
             row("jobs waiting > 1 h", [f"{f.waits_all.over_an_hour:.1%}" for f in figures]),
             row("preemptions", [str(sum(p.count for p in f.preemptions)) for f in figures]),
             row("device-hours thrown away", [f"{sum(p.device_hours_lost for p in f.preemptions):.1f}" for f in figures]),
             row("guarantee not honoured (min)", [f"{sum(g.unhonoured_minutes for g in f.guarantees):.0f}" for f in figures]),
             row("fairness (Jain, use/guarantee)", [f"{f.fairness:.3f}" for f in figures])]
    for f in figures:
        lines += ["", f"{f.side} ({f.revision[:12]}): utilisation per flavor", f"  {'cluster':<16}{'resource':<34}{'flavor':<16}{'used':>8}"]
        lines += [f"  {u.cluster:<16}{u.resource:<34}{u.flavor or '(all)':<16}{u.utilisation:>8.1%}" for u in f.utilisation]
        lines += [f"  {'waits (h)':<24}{'p50':>7} {'p90':>7} {'p99':>7} {'>1h':>7} {'jobs':>6}"]
        lines += [f"  {w.group:<24}{_cells(w)} {w.jobs:>6}" for w in (*f.waits_by_tenant, *f.waits_by_class)]
        lines += [f"  preempted: {p.victim_tenant}/{p.victim_class} by {p.preemptor_tenant}/{p.preemptor_class}: {p.count}, "
                  f"{p.device_hours_lost:.1f} device-hours lost" for p in f.preemptions]
        lines += [f"  guarantee of {g.tenant} ({g.resource} on {g.cluster}) not honoured {g.unhonoured_minutes:.0f} min in {g.episodes} "
                  f"stretches, the longest {g.longest_minutes:.0f} min" for g in f.guarantees if g.unhonoured_minutes]
    lines += ["", *(f"assumed: {a}" for a in ASSUMPTIONS)]
    return "\n".join(lines) + "\n"


def impact(base: SideFigures, head: SideFigures, trace: Trace) -> dict[str, Any]:
    """What a change does to the work, base → head, as plain data: the plan's "What it does to the work" and
    the policy input's `change.work` (policies/work.rego). Each figure beside what it depends on: the
    trace's source, jobs and window, and the load it offers each side (its ceiling)."""
    after = {w.group: w for w in head.waits_by_tenant}  # one trace: the same tenants' jobs on both sides
    tenants = [{"tenant": b.group, "jobs": b.jobs, "wait_p50_hours": b.p50, "wait_p50_hours_after": after[b.group].p50,
                "wait_p99_hours": b.p99, "wait_p99_hours_after": after[b.group].p99,
                "device_hours": base.device_hours_by_tenant.get(b.group, 0.0), "device_hours_after": head.device_hours_by_tenant.get(b.group, 0.0),
                "never_admitted": b.never_admitted, "never_admitted_after": after[b.group].never_admitted}
               for b in base.waits_by_tenant]
    return {"source": trace.source, "jobs": len(trace.jobs), "window_hours": trace.window / 3600,
            "utilisation": base.total_utilisation, "utilisation_after": head.total_utilisation,
            "offered_load": base.offered_load, "offered_load_after": head.offered_load,
            "backlog_jobs": base.backlog_jobs, "backlog_jobs_after": head.backlog_jobs,
            "tenants": tenants, "assumptions": list(ASSUMPTIONS)}
