"""What the replay's figures say of a change: its impact base → head (plain data for the plan and the policy input), and the
assumptions every form states beside the figures (the forms themselves: fleetops.output.text.whatif and json.whatif)."""

from __future__ import annotations

from typing import Any

from fleetops.whatif.figures import SideFigures
from fleetops.whatif.trace import Trace

ASSUMPTIONS = (
    "simulated time on the real Kueue v0.17: jobs are Workloads submitted at their arrival and finished exactly their duration after "
    "admission; no pod runs, so node fit, images and start-up are not modelled",
    "a preempted job loses the work of its run and starts over when admitted again (no checkpoints)",
    "a job still waiting at the end of the window counts with the wait it has had so far",
)


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
