"""What a reviewer reads: the plan as a bounded pull-request comment (`comment`), and whole (`full`); the
audit report as Markdown (`audit`).

The comment leads with the verdict, the cost and the change in fleet terms, then what blocks it and
how to fix it; object-level detail follows, folded. A pull-request comment holds at most 65,536
characters: `comment` keeps under `max_chars` by summarising objects per cluster and kind and
pointing to the full plan (`full`, kept as a CI artifact with the JSON), the way Infracost and
argocd-diff-preview bound theirs.
"""

from __future__ import annotations

import difflib
import html
import json
import re
from collections import Counter
from typing import Any, NamedTuple

from fleetops import spec, usage
from fleetops.audit import AuditReport, GateKind, malformed_summary, work_summary
from fleetops.diff import FieldChange
from fleetops.errors import Problem
from fleetops.kube import ObjectKey
from fleetops.envelope import DecisionStatus, Severity
from fleetops.plan_result import CapacityChange, Cost, FindingKind, PlanDecision, PlanResult, ServiceChange, PlanSide, TenantGrant, PlanVerdict

DEFAULT_MAX_CHARS = 55_000  # GitHub refuses comments over 65,536; GitLab notes over 1,000,000
VERDICT = {PlanVerdict.DENIED: "❌ denied", PlanVerdict.NEEDS_APPROVAL: "⏳ needs approval", PlanVerdict.ALLOWED: "✅ allowed",
           PlanVerdict.INVALID: "⛔ cannot be judged"}
SECURITY = "🔒"


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _signed(value: float) -> str:
    return ("+" if value > 0 else "") + _num(value)


def _arrow(before: Any, after: Any) -> str:
    return f"{before}" if before == after else f"{before} → {after}"


# Every string that comes from an environment file or the policies (descriptions, messages, owners,
# waiver reasons, names) is shown as written and never read as markup: GitHub renders the raw HTML of a
# comment (`<img src=x onerror=...>`, a `<details>` that swallows the verdict) and markdown's own
# links and images. `_text` for text, `_code` for inline code, `_fenced` for blocks.


def _line(value: Any) -> str:
    """One line of a table or list: `|` would end a table cell, a newline the item."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)  # a YAML date (billing top-ups) as written
    return text.replace("|", "\\|").replace("\n", "⏎")


def _text(value: Any) -> str:
    """Markdown text that shows `value` as written: HTML escaped; backslashes, backticks and the
    brackets of links and images made inert."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)  # a YAML date (billing top-ups) as written
    return _line(html.escape(re.sub(r"([\\`\[\]])", r"\\\1", text), quote=False))


def _code(value: Any) -> str:
    """Inline code that no backtick of `value` can close early (the renderer escapes what is inside)."""
    text = _line(value)
    ticks = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fenced(lines: list[str], info: str = "diff") -> list[str]:
    """A code block that no line of `lines` can close: its fence is longer than any run of backticks in them."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *lines, fence]


def _where(d: PlanDecision) -> str:
    loc = d.location
    if loc is None:
        return ""
    return f" — {_code(f'{loc.file}:{loc.line}')}"


# --- sections, most important first ------------------------------------------------------------


def header(plan: PlanResult) -> list[str]:
    c, n, objs = plan.cost, plan.counts, plan.objects
    flags = f" · {SECURITY} **{plan.security_changes:,} security-relevant change(s)**{_security_kinds(plan)}" if plan.security_changes else ""
    lines = [
        f"### fleetops plan {_code(plan.environment)}: {VERDICT[plan.verdict]}",
        "",
        f"**Monthly cost** {_num(c.before)} → {_num(c.after)} {_text(c.currency)} (**{_signed(c.delta)}**{_price_share(c)}) · "
        f"**Objects** +{len(objs.added):,} ~{len(objs.changed):,} −{len(objs.removed):,} · "
        f"**Decisions** {n['deny']:,} deny, {n['approval']:,} need approval, {n['warn']:,} warn, {n['waived']:,} waived{_findings(plan)}{flags}",
        "",
        f"Judged by the policies of the base revision {_code(plan.base.revision[:12])}.",
    ]
    if not plan.head.exists:
        deleted = spec.environment_path(plan.environment).as_posix()
        lines += ["", f"> ⚠️ This change deletes {_code(deleted)}: every object below is removed."]
    # Those the change made (or not compared with a base: loud, as new); a waiver already in force at base
    # is counted in the decisions, not raised on every change.
    waived = [d for d in plan.decisions if d.status is DecisionStatus.WAIVED and d.severity in (Severity.CRITICAL, Severity.HIGH)
              and d.finding is not FindingKind.PRE_EXISTING]
    if waived:
        lines += ["", "> ⚠️ **Waived high-severity denials** (they would block without their waiver):"]
        lines += [f"> - {_code(d.rule)} {_text(d.msg)} — owner {_text(d.waiver.owner)}, {_text(d.waiver.ticket)}, "
                  f"expires {d.waiver.expires.isoformat()}"
                  if d.waiver else f"> - {_code(d.rule)} {_text(d.msg)} (waiver {_text(d.waived_by)})" for d in waived]
    if plan.program_file_changes:
        files = ", ".join(_code(f) for f in plan.program_file_changes[:10]) + (" …" if len(plan.program_file_changes) > 10 else "")
        lines += ["", f"> {SECURITY} **Program change** ({len(plan.program_file_changes)} file(s): {files}): the objects below are "
                      "what the head's own program renders (confined, without tokens); it needs the code owners' approval."]
    if not plan.policy.judge_program_is_base:
        lines += ["", "> ⚠️ Judged by a program other than the base revision's: CI runs the base's `fleetops` (docs/ci/)."]
    if plan.policy.needs_policy_owner_review:
        owners = ", ".join(_text(o) for o in plan.policy.owners) or "(no policies/owners.yaml)"
        files = ", ".join(_code(f) for f in plan.policy.policy_files_changed)
        lines += ["", f"> ⚠️ **Policy change** ({files}): needs review by the policy owners: {owners}. It takes effect only after merge."]
    return lines


def _findings(plan: PlanResult) -> str:
    """` (2 new, 3 pre-existing, 1 resolved)`: what the change did to the findings, beside what they are."""
    f = plan.findings
    return f" ({f['new']:,} new, {f['pre-existing']:,} pre-existing, {f['resolved']:,} resolved)" if plan.base.exists else ""


def _price_share(c: Cost) -> str:
    """What the edited prices alone do to the month, apart from capacity: a price change is not more devices."""
    return f": {_signed(c.from_prices)} from price changes, {_signed(c.from_capacity)} from capacity" if c.from_prices else ""


def _security_kinds(plan: PlanResult) -> str:
    """What the security-relevant changes are, by kind: a new environment's hundreds of fingerprints and
    node matches read as a few counts, not as one alarming number."""
    kinds = Counter(e.security_field for e in plan.spec_changes if e.security)
    kinds.update({"policy file(s)": sum(f.security for f in plan.policy_file_changes), "program file(s)": len(plan.program_file_changes)})
    named = [f"{n:,} {_text(k)}" for k, n in kinds.most_common() if n]
    return f" ({', '.join(named)})" if named else ""


TOP_CHANGES = 20  # of "What changes" in the comment, largest first; the full plan lists every one


def what_changes(plan: PlanResult, top: int | None = TOP_CHANGES) -> list[str]:
    """The change in fleet terms, largest first (`fleet_changes` come ordered by cost and devices moved):
    the `top` largest security-relevant ones and the `top` largest of the others (all when `top` is None)."""
    changes = plan.fleet_changes
    ranks = {id(c): rank for flag in (True, False) for rank, c in enumerate(c for c in changes if c.security is flag)}
    shown = [c for c in changes if top is None or ranks[id(c)] < top]
    items = [f"- {SECURITY + ' ' if c.security else ''}{_text(c.text)}" for c in shown]
    if len(shown) < len(changes):
        items.append(f"- … and {len(changes) - len(shown):,} smaller change(s), in the full plan")
    edits = plan.spec_changes
    if edits:
        flagged = sum(e.security for e in edits)
        items.append(f"- {len(edits):,} field(s) of {_code(edits[0].file)} changed"
                     + (f", {SECURITY} {flagged:,} security-relevant" if flagged else "") + " (listed below)")
    return ["", "**What changes**", "", *items] if items else []


def autoscaling(plan: PlanResult, top: int | None = TOP_CHANGES) -> list[str]:
    """The inference services the change adds or changes, in fleet terms, the most spend at max first
    (the others are in their fold)."""
    moved = sorted((s for s in plan.services if s.change is not ServiceChange.UNCHANGED), key=lambda s: -abs(s.monthly_at_max_delta))
    shown = moved if top is None else moved[:top]
    items = [f"- {_text(s.text)}" for s in shown]
    if len(shown) < len(moved):
        items.append(f"- … and {len(moved) - len(shown):,} more service(s), in the full plan")
    return ["", "**Inference autoscaling**", "", *items] if items else []


GROUP_OVER = 3  # a rule with more decisions than this is one line with counts, not one line per decision


def _grouped(decisions: list[PlanDecision]) -> list[str]:
    """Decisions of one rule together, most numerous first; a rule with many is one line: how many, over
    how many tenants and clusters, the first as an example, and the fix they share."""
    by_rule: dict[str, list[PlanDecision]] = {}
    for d in decisions:
        by_rule.setdefault(d.rule, []).append(d)
    lines: list[str] = []
    for rule, ds in sorted(by_rule.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(ds) <= GROUP_OVER:
            for d in ds:
                lines.append(f"- {_code(rule)} {_text(d.msg)}{_where(d)}")
                if d.fix:
                    lines.append(f"  - **Fix:** {_text(d.fix)}")
            continue
        lines += [f"- {_code(rule)} × {len(ds):,}{_spread(ds)}", f"  - e.g. {_text(ds[0].msg)}{_where(ds[0])}"]
        fixes = {d.fix for d in ds} - {""}
        if len(fixes) == 1:
            lines.append(f"  - **Fix:** {_text(fixes.pop())}")
    return lines


def _spread(decisions: list[PlanDecision]) -> str:
    """`: 1,000 tenant(s) on 20 cluster(s) (tenant-0, tenant-1, …)` of one rule's decisions."""
    def named(key: str) -> list[str]:
        return list(dict.fromkeys(str(d.subject[key]) for d in decisions if d.subject.get(key)))

    tenants, clusters = named("tenant"), named("cluster")
    parts = ([f"{len(tenants):,} tenant(s)"] if tenants else []) + ([f"{len(clusters):,} cluster(s)"] if clusters else [])
    names = tenants or clusters
    examples = f" ({', '.join(_text(n) for n in names[:5])}{', …' if len(names) > 5 else ''})" if names else ""
    return f": {' on '.join(parts)}{examples}" if parts else ""


def blocking(plan: PlanResult) -> list[str]:
    """What blocks the change: what it made first; what was already there at base folded under its count,
    since it blocks all the same (fail closed: a pre-existing deny still denies)."""
    lines: list[str] = []
    for status, title in ((DecisionStatus.DENY, "**Denied by**"), (DecisionStatus.APPROVAL, "**Needs approval**")):
        these = [d for d in plan.decisions if d.status is status]
        made, there = [d for d in these if d.finding is not FindingKind.PRE_EXISTING], [d for d in these if d.finding is FindingKind.PRE_EXISTING]
        if not these:
            continue
        has = f"; has {plan.approvals.have}" if status is DecisionStatus.APPROVAL else ""
        lines += ["", f"{title} ({len(these):,} decision(s){has})", "", *_grouped(made)]
        if there:
            lines += _details(f"{len(there):,} pre-existing: already at base, not made by this change, and still blocking it", _grouped(there))
    return lines


USAGE_LINES = 20  # of utilisation in the comment; the full plan has every one


def utilisation(plan: PlanResult, top: int | None = USAGE_LINES) -> list[str]:
    """Measured use of each tenant quota and pool the change touches, or why it is unknown (never zero)."""
    used = plan.usage
    rows = usage.lines(used) if used else []
    if not used or not rows:
        return []
    window = usage.parse_window(used.window).spoken()
    title = f"**Utilisation** over the last {window}" + ("" if used.status is usage.Status.measured else " (unknown is not zero use)")
    shown = rows if top is None else rows[:top]
    items = [f"- {_text(line)}" for line in shown]
    if len(shown) < len(rows):
        items.append(f"- … and {len(rows) - len(shown):,} more, in the full plan")
    return ["", title, "", *items]


CAPACITY_ROWS = 12  # past this many moved rows, the top says totals per device resource; each cluster is folded


def capacity_moves(plan: PlanResult) -> list[str]:
    """The capacity the change moves, next to the verdict; of a new environment only what it will have."""
    moved = [r for r in plan.capacity if r.moved]
    shown = _fleet_totals(moved) if len(moved) > CAPACITY_ROWS else moved
    return ["", *_capacity_table(shown, changed=bool(plan.base.exists))] if moved else []


SUMMED = ("physical", "schedulable", "guaranteed", "burst")


def _fleet_totals(rows: list[CapacityChange]) -> list[CapacityChange]:
    """Capacity rows summed over their clusters, one per device resource, the most devices first."""
    sums: dict[str, tuple[Counter[str], Counter[str]]] = {}
    for r in rows:
        before, after = sums.setdefault(r.resource, (Counter(), Counter()))
        before.update({k: getattr(r.before, k) for k in SUMMED})
        after.update({k: getattr(r.after, k) for k in SUMMED})
    where = f"all {len({r.cluster for r in rows}):,} clusters"
    totals = [CapacityChange(where, resource, _derived(before), _derived(after)) for resource, (before, after) in sums.items()]
    return sorted(totals, key=lambda r: -r.after.physical)


def _derived(c: Counter[str]) -> spec.Capacity:
    """Sharing factor and headroom of summed capacity, as `spec.capacity_rows` derives them per cluster."""
    return spec.Capacity.of(c["physical"], c["schedulable"], c["guaranteed"], c["burst"])


def _cell(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _capacity_table(rows: list[CapacityChange], changed: bool) -> list[str]:
    out = ["| cluster | resource | physical | schedulable | sharing | guaranteed | burst | headroom % |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b, a = r.before, r.after
        cols = ("physical", "schedulable", "sharing_factor", "guaranteed", "burst", "headroom_percent")
        cells = [_arrow(_cell(getattr(b, k)), _cell(getattr(a, k))) if changed else _cell(getattr(a, k)) for k in cols]
        cells[2] = "×" + cells[2].replace(" → ", " → ×")
        out.append(f"| {_text(r.cluster)} | {_code(r.resource)} | " + " | ".join(cells) + " |")
    return out


def _details(summary: str, body: list[str]) -> list[str]:
    return ["", f"<details><summary>{summary}</summary>", "", *body, "", "</details>"] if body else []


class Fold(NamedTuple):
    """A folded section: its title, the lines before its rows (a table's head) and its rows, most
    important first, each one or more lines. A bounded comment keeps as many whole rows as fit and
    says how many it left to the full plan."""

    title: str
    head: list[str]
    rows: list[list[str]]
    fenced: bool = False  # the rows are diff lines, in one code block
    noun: str = "row(s)"

    def lines(self, budget: int | None = None, pointer: str = "") -> list[str]:
        if not self.rows:
            return []
        kept: list[list[str]] = []
        used = len(self.title) + sum(len(line) + 1 for line in self.head) + 200
        for row in self.rows:
            size = sum(len(line) + 1 for line in row)
            if budget is not None and used + size > budget:
                break
            kept.append(row)
            used += size
        rows = [line for row in kept for line in row]
        body = (self.head + (_fenced(rows) if self.fenced else rows)) if kept else []
        count = f"{len(self.rows):,}"
        if len(kept) < len(self.rows):
            count += f", {len(kept):,} shown"
            body += ["", f"{len(self.rows) - len(kept):,} more {self.noun} not shown here: {pointer}"]
        return _details(f"{self.title} ({count})", body)


def spec_fields(plan: PlanResult) -> Fold:
    # What decides who may run where first, then down the file.
    edits = sorted(plan.spec_changes, key=lambda e: (not e.security, e.side is not PlanSide.HEAD, e.line))
    return Fold("Environment file changes", ["| | field | before | after | where |", "|---|---|---|---|---|"], [
        [f"| {SECURITY if e.security else ''} | {_code(e.path)} | {' | '.join(_values(e.old, e.new))} | {_code(e.place)} |"] for e in edits])


def _values(old: Any, new: Any) -> tuple[str, str]:
    """Before and after cells; of a list (fingerprints, allow lists), only what left and what came."""
    if isinstance(old, list) and isinstance(new, list):
        gone, came = [x for x in old if x not in new], [x for x in new if x not in old]
        return (", ".join(f"−{_code(x)}" for x in gone) or "—", ", ".join(f"+{_code(x)}" for x in came) or "—")
    return (_text(old) if old is not None else "—", _text(new) if new is not None else "—")


def policy_files(plan: PlanResult) -> Fold:
    return Fold("Policy file changes", [], noun="file(s)", rows=[
        [f"{SECURITY + ' ' if f.security else ''}{_code(f.file)}", "", *_fenced(f.diff.rstrip("\n").split("\n")), ""]
        for f in plan.policy_file_changes])


STATUS_ORDER = {DecisionStatus.DENY: 0, DecisionStatus.APPROVAL: 1, DecisionStatus.WARN: 2, DecisionStatus.WAIVED: 3}


def _decision_rows(decisions: list[PlanDecision]) -> list[list[str]]:
    """Those the change made first, then those already at base; by status."""
    rows = []
    for d in sorted(decisions, key=lambda d: (d.finding is FindingKind.PRE_EXISTING, STATUS_ORDER[d.status])):
        where = _text(f"{d.location.file}:{d.location.line}") if d.location else ""
        rows.append([f"| {_text(d.finding.value if d.finding else '')} | {_text(d.status.value)} | {_code(d.rule)} | {_text(d.severity.value)} | {_text(d.resource)} "
                     f"| {_text(d.msg)} | {where} |"])
    return rows


DECISION_HEAD = ["| finding | status | rule | severity | resource | message | where |", "|---|---|---|---|---|---|---|"]


def decision_table(plan: PlanResult) -> Fold:
    return Fold("Policy decisions", DECISION_HEAD, _decision_rows(plan.decisions))


def resolved_table(plan: PlanResult) -> Fold:
    """The base's decisions the change leaves behind: they judge nothing."""
    return Fold("Resolved by this change", DECISION_HEAD, _decision_rows(plan.resolved))


def quota_table(plan: PlanResult) -> Fold:
    moved = sorted(plan.quota_changes, key=lambda q: -abs(q.after.guaranteed - q.before.guaranteed))
    return Fold("Quota changes", ["| tenant | cluster | resource | guaranteed | burst |", "|---|---|---|---:|---:|"], [
        [f"| {_text(q.tenant)} | {_text(q.cluster)} | {_code(q.resource)} | {_arrow(q.before.guaranteed, q.after.guaranteed)} "
         f"| {_arrow(q.before.burst, q.after.burst)} |"] for q in moved])


def _tainted(row: TenantGrant) -> str:
    """Which part of a tenant's guarantee only jobs tolerating a pool's taints can use."""
    return "".join(f" ({_cell(row.flavors[f]['guaranteed'])} on {_text(f)}: for jobs tolerating {', '.join(_code(t) for t in taints)})"
                   for f, taints in sorted(row.held_on_tainted.items()))


def grants_table(plan: PlanResult) -> Fold:
    """What Kueue will grant on an idle cluster (fleetops.grants), per tenant and per cluster, the most
    units first; ⚠️ where a tenant cannot reach its declared burst."""
    granted = plan.grants
    rows = [(r.reachable, f"| {_text(r.cluster)} | {_text(r.tenant)} | {_code(r.resource)} | {_cell(r.guaranteed)}{_tainted(r)} "
                          f"| {'⚠️ ' if r.burst is not None and r.reachable < r.burst else ''}{_cell(r.reachable)} "
                          f"| {_cell(r.burst) if r.burst is not None else '—'} | {_cell(r.largest_job)} | {_cell(r.lends)} |")
            for r in granted.tenants]
    rows += [(c.quota, f"| {_text(c.cluster)} | all tenants | {_code(c.resource)} | {_cell(c.guaranteed)} | {_cell(c.quota)} "
                       f"| — | — | {_cell(c.shared)} |") for c in granted.clusters]
    return Fold("What Kueue will grant on an idle cluster",
                ["| cluster | tenant | resource | guaranteed | reachable burst | declared burst | largest job | lends |",
                 "|---|---|---|---:|---:|---:|---:|---:|"],
                [[line] for _, line in sorted(rows, key=lambda r: -r[0])])


def services_table(plan: PlanResult) -> Fold:
    """Every inference service of the head: its replicas, what they take at max of what Kueue grants, what they cost at max."""
    rows = [[f"| {_text(s.tenant)}/{_text(s.name)} | {_text(s.cluster)} | {s.min:,}–{s.max:,} × {s.devices:,} {_code(s.resource)} "
             f"| {'⚠️ ' if s.at_max > s.reachable else ''}{s.at_max:,} of {s.reachable:,} | {_num(s.monthly_at_max)} |"]
            for s in sorted(plan.services, key=lambda s: -s.monthly_at_max)]
    return Fold("Inference services at max replicas",
                ["| service | cluster | replicas × devices | at max of reachable burst | spend at max /mo |", "|---|---|---|---:|---:|"], rows)


def object_summary(plan: PlanResult) -> Fold:
    """Objects added, changed and removed per cluster and kind: bounded whatever the change's size."""
    counts: Counter[tuple[str, str, str]] = Counter()
    objs = plan.objects
    for what, keys in (("added", objs.added), ("changed", list(objs.changed)), ("removed", objs.removed)):
        for cluster, _, kind, _, _ in keys:
            counts[(cluster, kind, what)] += 1
    keys = sorted({(c, k) for c, k, _ in counts})
    return Fold("Objects per cluster and kind", ["| cluster | kind | + | ~ | − |", "|---|---|---:|---:|---:|"], [
        [f"| {_text(c)} | {_text(k)} | {counts[(c, k, 'added')]} | {counts[(c, k, 'changed')]} | {counts[(c, k, 'removed')]} |"] for c, k in keys])


def _name(key: ObjectKey) -> str:
    cluster, _, kind, namespace, name = key
    ns = f"{namespace}/" if namespace else ""
    return f"{cluster}: {kind} {ns}{name}"


def _field_lines(f: FieldChange) -> list[str]:
    old, new = f.old, f.new
    if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
        # Unindented: GitHub colours a ```diff line by its first character.
        return list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{f.path} (base)", f"{f.path} (head)", n=2, lineterm=""))
    return [f"    {f.op} {f.path}: {json.dumps(old)} → {json.dumps(new)}"]


def object_changes(plan: PlanResult) -> Fold:
    """One block of ```diff lines per object, so that a bounded comment can stop between objects."""
    objs = plan.objects
    blocks = [[f"+ {_name(o)}"] for o in objs.added] + [[f"- {_name(o)}"] for o in objs.removed]
    for o, fields in objs.changed.items():
        blocks.append([f"~ {_name(o)}", *(line for f in fields for line in _field_lines(f))])
    return Fold("Object changes", [], blocks, fenced=True, noun="object(s)")


def with_capacity(plan: PlanResult) -> Fold:
    """Every cluster's capacity; none when the capacity table above has every row."""
    table = _capacity_table(plan.capacity, changed=False)
    moved = sum(r.moved for r in plan.capacity)
    whole = moved < len(plan.capacity) or moved > CAPACITY_ROWS
    return Fold("Capacity per cluster and device resource", table[:2], [[row] for row in table[2:]] if whole else [])


def _hours(before: float, after: float) -> str:
    return _arrow(f"{before:,.2f}", f"{after:,.2f}")


def work_table(plan: PlanResult) -> Fold:
    """What the change does to the work (plan --whatif): the trace, the fleet's utilisation beside the load
    it offers, then per tenant wait and use base → head, the p99 wait that grows most first."""
    work = plan.work
    if work is None:
        return Fold("What it does to the work", [], [])
    load = f"{work.offered_load:.1%}" if work.offered_load == work.offered_load_after else f"{work.offered_load:.1%} → {work.offered_load_after:.1%}"
    head = [f"{_code(work.source)}: {work.jobs:,} job(s) over {_num(work.window_hours)} h, replayed on the real Kueue at base and at head "
            "(simulated time: docs/whatif.md).", "",
            f"**Allocation utilisation** {_arrow(f'{work.utilisation:.1%}', f'{work.utilisation_after:.1%}')} at an offered load "
            f"(the ceiling) of {load}; **backlog at the end** {_arrow(work.backlog_jobs, work.backlog_jobs_after)} job(s).", "",
            "| tenant | jobs | wait p50 (h) | wait p99 (h) | device-hours used | never admitted |", "|---|---:|---:|---:|---:|---:|"]
    tenants = sorted(work.tenants, key=lambda t: (-(t.wait_p99_hours_after - t.wait_p99_hours), t.tenant))
    rows = [[f"| {_text(t.tenant)} | {t.jobs:,} | {_hours(t.wait_p50_hours, t.wait_p50_hours_after)} "
             f"| {_hours(t.wait_p99_hours, t.wait_p99_hours_after)} | {_arrow(_num(t.device_hours), _num(t.device_hours_after))} "
             f"| {_arrow(t.never_admitted, t.never_admitted_after)} |"] for t in tenants]
    return Fold("What it does to the work", head, rows, noun="tenant(s)")


def _folds(plan: PlanResult) -> list[Fold]:
    """The folded sections, most important first."""
    return [spec_fields(plan), decision_table(plan), resolved_table(plan), work_table(plan), with_capacity(plan), grants_table(plan), services_table(plan), policy_files(plan), quota_table(plan),
            object_summary(plan), object_changes(plan)]


def full(plan: PlanResult) -> str:
    """The whole plan as markdown, without a size limit: the CI artifact the comment points to."""
    if not plan.judged:
        return cannot_judge(plan, None)
    lines = header(plan) + what_changes(plan, top=None) + autoscaling(plan, top=None) + blocking(plan) + utilisation(plan, top=None) + capacity_moves(plan)
    return _join(lines + [line for fold in _folds(plan) for line in fold.lines()], [])


def _join(lines: list[str], tail: list[str]) -> str:
    return "\n".join(lines + tail) + "\n"


def _revision(name: str) -> str:
    """A commit by its short id; `default branch` or `working tree` as said."""
    return name[:12] if re.fullmatch(r"[0-9a-f]{40}", name) else name


def _problem(p: Problem) -> str:
    """One problem: its place first, then what is wrong, the place said once."""
    if p.place is None:
        return f"- {_text(p.message)}"
    return f"- {_code(p.place)} {_text(': '.join(x for x in (p.path, p.message) if x))}"


def cannot_judge(plan: PlanResult, max_chars: int | None = DEFAULT_MAX_CHARS) -> str:
    """The comment for a change that cannot be judged (an invalid side, no policy engine): it replaces
    any earlier verdict on the pull request, and says why, each problem on its line (all of them
    without `max_chars`)."""
    shown, body = [], 0
    for p in plan.problems:
        line = _problem(p)
        if max_chars is not None and body + len(line) > max_chars - 2000:
            shown.append(f"- … and {len(plan.problems) - len(shown):,} more (see the full plan)")
            break
        shown.append(line)
        body += len(line) + 1
    lines = [
        f"### fleetops plan {_code(plan.environment)}: {VERDICT[PlanVerdict.INVALID]}",
        "",
        f"The change cannot be judged, so it cannot be merged: base {_code(_revision(plan.base.revision))}, "
        f"head {_code(_revision(plan.head.revision))}. Any earlier verdict on this pull request no longer holds.",
        "",
        f"**What is wrong** ({len(plan.problems):,})",
        "",
        *shown,
        "",
        "Fix each line above and push again: the plan runs again on the new head and replaces this comment.",
    ]
    return _join(lines, [])


def comment(plan: PlanResult, max_chars: int = DEFAULT_MAX_CHARS, artifacts: str = "") -> str:
    """The pull-request comment, at most `max_chars` characters, chosen by importance: the verdict and
    totals, what changes (largest first), what blocks it (grouped per rule), the capacity it moves; then
    each folded section, most important first, as many of its rows as its share of what is left holds.
    What does not fit is counted and left to the full plan in `artifacts`. Of a plan that cannot be
    judged, why (`cannot_judge`)."""
    if not plan.judged:
        return cannot_judge(plan, max_chars)
    pointer = f"see the full plan ({artifacts})" if artifacts else "see the full plan (`fleetops plan --output json`, or the CI artifact)"
    note = ["", f"_Comment shortened to {max_chars:,} characters: {pointer}._"]
    lines = header(plan) + what_changes(plan) + autoscaling(plan) + blocking(plan) + utilisation(plan) + capacity_moves(plan)
    folds = [fold for fold in _folds(plan) if fold.rows]
    left = max_chars - len(_join(lines, note))
    for index, fold in enumerate(folds):
        # Each fold may take an equal share of what is left; what a small one leaves goes to the next.
        section = fold.lines(left // (len(folds) - index), pointer)
        lines += section
        left -= len(_join(section, []))
    text = _join(lines, [])
    if len(text) > max_chars:  # the essentials alone are too long: cut at a line
        text = _join([text[: max_chars - 200].rsplit("\n", 1)[0]], note)
    return text


# --- the audit report (`audit --output markdown`) ---------------------------------------------

GATE_TITLES = {GateKind.production: "production gate (reconcile, Pulumi pack, check outside pull requests)",
               GateKind.pull_request: "pull requests (plan, check in a pull request)",
               GateKind.local: "local plans (outside CI or a pull request: previews, they gated nothing)"}


def _who(d: dict[str, Any]) -> str:
    """Source, pull request and actor of a logged denial, as one cell."""
    return " ".join(filter(None, (d["source"] or "unknown source", f"PR #{d['pr']}" if d["pr"] else "", f"by {d['actor']}" if d["actor"] else "")))



def _work_lines(w: dict[str, Any]) -> list[str]:
    """The replay's rows (`audit --whatif`); its pictures are in the HTML form."""
    lines = ["", f"## What the configuration does to the work: {w['environment']}", "",
             f"{w['jobs']} jobs of {w['source']} over {w['window_hours']:g} h, replayed on the real Kueue once per side (`fleetops whatif`); "
             "the offered load is the most a side can reach. Pictures: the HTML form.", "",
             "| side | revision | utilisation | offered load | backlog (jobs) | wait p50 / p99 (h) | waited > 1 h | preemptions | fairness (Jain) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {s['side']} | `{s['revision'][:12]}` | {s['utilisation']:.1%} | {s['offered_load']:.1%} | {s['backlog_jobs']} | "
              f"{s['wait_p50_hours']:g} / {s['wait_p99_hours']:g} | {s['over_an_hour']:.1%} | {s['preemptions']} | {s['fairness']:.3f} |" for s in w["sides"]]
    return lines + ["", "Assumptions:", "", *(f"- {a}" for a in w["assumptions"])]


def audit(report: AuditReport) -> str:
    p = report.provenance
    lines = [
        "# fleetops policy audit",
        "",
        f"Revision `{p.revision}` ({p.revision_date}), policy digest `{p.policy_digest}`, engine {p.engine} {p.engine_version}.",
        f"{len(report.policies)} rules; {report.tests.passed} of {report.tests.total} policy tests pass; {len(report.waivers)} waivers.",
        "",
        "## Policy inventory",
        "",
        "| control | rule | title | severity | enforced by | owners | location | last change | tests |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.policies:
        change = f"`{r['last_change']['commit'][:10]}` {r['last_change']['author']} {r['last_change']['date']}" if r["last_change"] else "not committed"
        tests = ", ".join(f"{t['name']} ({'pass' if t['passed'] else 'FAIL'})" for t in r["tests"]) or "**no test**"
        enforced, owners = ", ".join(r["enforced_by"]) or "no gate", ", ".join(r["owners"]) or "none"
        lines.append(f"| {r['control_id']} | `{r['rule']}` | {r['title']} | {r['severity']} | {enforced} | {owners} | `{r['file']}:{r['line']}` | {change} | {tests} |")
    lines += ["", "## Coverage", "", "| file | coverage % | uncovered lines |", "|---|---:|---|"]
    lines += [f"| `{c['file']}` | {c['percent']} | {', '.join(map(str, c['uncovered'])) or 'none'} |" for c in report.coverage]
    lines += ["", "## Current decisions", ""]
    for e in report.environments:
        n = e.counts
        lines.append(f"### {e.name}: {n['deny']} deny, {n['warn']} warn, {n['waived']} waived")
        lines.append("")
        lines += [f"- **{d['status']}** `{d['rule']}` {d['resource']}: {d['msg']}" for d in e.decisions] or ["No decisions."]
        lines.append("")
    lines += ["## Waivers", "", "| status | rule | scope | owner | reason | ticket | expiry | days left |", "|---|---|---|---|---|---|---|---:|"]
    lines += [
        f"| {w['status']}{': ' + w['problem'] if w['problem'] else ''} | `{w['rule']}` | {w['scope_text']} | {w['owner']} | {w['reason']} | {w['ticket']} | {w['expires']} | {w['days_left'] if w['days_left'] is not None else ''} |"
        for w in report.waivers
    ]
    if (st := report.statements) is not None:
        lines += ["", f"## Statements: {st['environment']}, {st['period']}", "", f"Read from {st['prometheus']}.", "",
                  "| tenant | mode | total | balance |", "|---|---|---:|---:|"]
        lines += [f"| {r['tenant']} | {r['mode']} | {r['total']:,.2f} {r['currency']} | "
                  f"{'' if r['balance'] is None else format(r['balance'], ',.2f') + ' ' + r['currency']} |" for r in st["rows"]]
    if report.work is not None:
        lines += _work_lines(work_summary(report.work))
    h = report.history
    lines += ["", "## History", "", f"{h['entries']} evaluations in the decision log." if h["entries"] else "No decision log entries."]
    if h["malformed"]:
        lines += ["", f"**{malformed_summary(h)}**", "", *(f"- {p}" for p in h["problems"])]
    for gate, title in GATE_TITLES.items():
        rows = h["latest_denials"][gate.value]
        lines += ["", f"### Latest denials: {title}", ""]
        lines += [f"- {d['time']} {_who(d)} {d['environment']} `{d['rule']}` ({d['status']}): {d['msg']}" for d in rows] or ["None."]
    return "\n".join(lines) + "\n"
