"""The figures of every side as pictures people look at rather than read: utilisation over the window,
one line per side under the offered load, and each tenant's waits (p50 to p99) per side. Self-contained SVG
with a title and a description, as the audit report's charts are: they go into CI artifacts and HTML
reports as they are, with no plotting stack in the reconciler's image.
"""

from __future__ import annotations

import math
from html import escape

from fleetops.whatif.figures import SideFigures

WIDTH = 760
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 40, 40
# Okabe and Ito's palette: the sides stay apart for readers with any common colour vision deficiency.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def _svg(name: str, height: int, title: str, description: str, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="{name}-t {name}-d" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="system-ui, sans-serif" font-size="12">',
        f'<title id="{name}-t">{escape(title)}</title>', f'<desc id="{name}-d">{escape(description)}</desc>', *body, "</svg>", ""])


def _legend(figures: list[SideFigures], label: str) -> list[str]:
    out, x = [], LEFT
    for i, f in enumerate(figures):
        text = f"{f.side} ({f.revision[:12]}){label.format(f=f)}"
        out += [f'<rect x="{x}" y="12" width="14" height="4" fill="{COLOURS[i % len(COLOURS)]}"/>', f'<text x="{x + 20}" y="18">{escape(text)}</text>']
        x += 20 + 7 * len(text) + 24  # about 7 px a character at 12 px
    return out


def _ticks(longest: float) -> list[float]:
    """Round values from 0 to past `longest`: a step of 1, 2 or 5 times a power of ten, four or five of them."""
    power = 10 ** math.floor(math.log10(longest / 4))
    step = next(power * m for m in (1, 2, 5, 10) if longest / (power * m) <= 5)
    return [round(step * i, 12) for i in range(math.ceil(longest / step) + 1)]


def utilisation(figures: list[SideFigures], window_hours: float) -> str:
    """Allocation utilisation step by step over the window, a line per side; the dashed line is the load the
    trace offered, the most any side can reach."""
    height = 260
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM

    def x(hours: float) -> float:
        return round(LEFT + plot_w * hours / window_hours, 1) if window_hours else LEFT

    def y(share: float) -> float:
        return round(TOP + plot_h * (1 - min(share, 1.0)), 1)

    body = [f'<line x1="{LEFT}" y1="{y(share)}" x2="{LEFT + plot_w}" y2="{y(share)}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y(share) + 4}" text-anchor="end">{share:.0%}</text>' for share in (0, 0.25, 0.5, 0.75, 1)]
    unit, hours = ("day", 24) if window_hours >= 48 else ("hour", 1)  # a short window read in days would have one mark
    span = window_hours / hours
    body += [f'<text x="{x(mark * hours)}" y="{TOP + plot_h + 16}" text-anchor="middle">{mark:g}</text>'
             for mark in (_ticks(span) if span else [0]) if mark <= span]
    body.append(f'<text x="{LEFT + plot_w / 2}" y="{height - 6}" text-anchor="middle">{unit} of the window</text>')
    if figures:
        offered = figures[0].offered_load
        body.append(f'<line x1="{LEFT}" y1="{y(offered)}" x2="{LEFT + plot_w}" y2="{y(offered)}" stroke="#444" stroke-dasharray="6 4"/>'
                    f'<text x="{LEFT + plot_w}" y="{y(offered) - 4}" text-anchor="end">offered load {offered:.0%}</text>')
    for i, f in enumerate(figures):
        points = []
        for step, share in enumerate(f.utilisation_over_time):  # a step is drawn flat over its hours
            points += [f"{x(step * f.step_hours)},{y(share)}", f"{x(min(window_hours, (step + 1) * f.step_hours))},{y(share)}"]
        body.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.5" points="{" ".join(points)}">'
                    f'<title>{escape(f.side)}: {f.total_utilisation:.1%} over the window</title></polyline>')
    body += _legend(figures, ": {f.total_utilisation:.1%}")
    sides = "; ".join(f"{f.side} {f.total_utilisation:.1%}" for f in figures)
    return _svg("utilisation", height, "Allocation utilisation over the window, per side",
                f"Device-time admitted over device-time there is, every {figures[0].step_hours:g} h, for the resources the trace asks of "
                f"({sides}); the dashed line is the offered load, the most any side can reach." if figures else "No side replayed.",
                body)


def waits(figures: list[SideFigures]) -> str:
    """Each tenant's queueing delay per side: a bar from its p50 to its p99 with a mark at its p90, in hours."""
    tenants = sorted({w.group for f in figures for w in f.waits_by_tenant})
    row_h, gap = 10, 8
    height = TOP + BOTTOM + len(tenants) * (len(figures) * row_h + gap)
    label_w = 130
    plot_w = WIDTH - label_w - RIGHT
    ticks = _ticks(max((w.p99 for f in figures for w in f.waits_by_tenant), default=0.0) or 1.0)
    longest = ticks[-1]

    def x(hours: float) -> float:
        return round(label_w + plot_w * hours / longest, 1)

    body = [f'<line x1="{x(h)}" y1="{TOP}" x2="{x(h)}" y2="{height - BOTTOM}" stroke="#ddd"/>'
            f'<text x="{x(h)}" y="{height - BOTTOM + 16}" text-anchor="middle">{h:g}</text>' for h in ticks]
    body.append(f'<text x="{label_w + plot_w / 2}" y="{height - 6}" text-anchor="middle">hours from arrival to admission (p50 to p99, mark at p90)</text>')
    top = TOP
    for tenant in tenants:
        body.append(f'<text x="{label_w - 8}" y="{top + len(figures) * row_h / 2 + 4}" text-anchor="end">{escape(tenant)}</text>')
        for i, f in enumerate(figures):
            colour = COLOURS[i % len(COLOURS)]
            mid = top + i * row_h + row_h / 2
            w = next((w for w in f.waits_by_tenant if w.group == tenant), None)
            if w is not None:
                body.append(f'<g><title>{escape(tenant)} on {escape(f.side)}: p50 {w.p50:g} h, p90 {w.p90:g} h, p99 {w.p99:g} h, {w.jobs} jobs</title>'
                            f'<line x1="{x(w.p50)}" y1="{mid}" x2="{x(w.p99)}" y2="{mid}" stroke="{colour}" stroke-width="4"/>'
                            f'<circle cx="{x(w.p50)}" cy="{mid}" r="3.5" fill="{colour}"/>'
                            f'<line x1="{x(w.p90)}" y1="{mid - 4}" x2="{x(w.p90)}" y2="{mid + 4}" stroke="#222" stroke-width="1.5"/></g>')
        top += len(figures) * row_h + gap
    body += _legend(figures, "")
    return _svg("waits", height, "Queueing delay per tenant, per side",
                "For each tenant, one bar per side from the median wait to the 99th percentile, with a mark at the 90th, in hours; "
                "a job still waiting at the end of the window counts with the wait it has had so far.", body)
