"""The audit report as one self-contained HTML page (`audit --output html`, the default): the report's data
(`fleetops.audit.build`) through templates/audit.html.j2, with an inline SVG chart of capacity and quota per environment."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import jinja2

from fleetops.audit import work_summary
from fleetops.output.markdown import GATE_TITLES

if TYPE_CHECKING:
    from fleetops.audit import AuditReport

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def capacity_chart(name: str, rows: list[dict[str, Any]]) -> str:
    """Inline SVG: per cluster x resource, a bar of capacity with guaranteed filled and burst marked.

    Each label has a line of its own above its bar, starting at the left edge, and the numbers a
    column of their own right of the bars: no label is cut, however long a resource name (an FPGA
    region's is 55 characters) and however full a bar. The SVG scales down to a narrow page."""
    bar_w, value_w, label_h, bar_h, gap, top = 640, 240, 16, 18, 12, 34
    row_h = label_h + bar_h + gap
    width, height = bar_w + value_w, top + row_h * len(rows) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="chart-{escape(name)}-t chart-{escape(name)}-d" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" style="max-width: 100%; height: auto">',
        f'<title id="chart-{escape(name)}-t">{escape(name)}: guaranteed and burst quota against capacity</title>',
        f'<desc id="chart-{escape(name)}-d">One bar per cluster and device resource. The outline is the capacity, '
        "the filled part the guaranteed quota, the dark mark the burst quota. The table below holds the same numbers.</desc>",
        '<g transform="translate(0,10)"><rect width="12" height="12" fill="#3b6fb6"/><text x="16" y="10">guaranteed</text>'
        '<rect x="110" width="3" height="12" fill="#111"/><text x="118" y="10">burst</text>'
        '<rect x="175" width="12" height="12" fill="none" stroke="#777"/><text x="191" y="10">capacity</text>'
        f'<text x="{bar_w + 12}" y="10">guaranteed / burst of capacity</text></g>',
    ]
    for i, row in enumerate(rows):
        y = top + i * row_h
        bar_y = y + label_h
        cap = max(int(row["capacity"]), 1)
        scale = max(cap, int(row["burst"]), int(row["guaranteed"]))
        g_w = bar_w * int(row["guaranteed"]) / scale
        c_w = bar_w * cap / scale
        b_x = min(bar_w * int(row["burst"]) / scale, bar_w - 1.5)  # a burst at the scale's end stays inside
        over = int(row["guaranteed"]) > int(row["capacity"])
        parts.append(
            f'<text x="0" y="{y + 12}">{escape(row["cluster"])} · {escape(row["resource"])}</text>'
            f'<rect x="0.5" y="{bar_y}" width="{c_w - 1:.1f}" height="{bar_h}" fill="#f4f4f4" stroke="#777"/>'
            f'<rect x="0.5" y="{bar_y + 3}" width="{max(g_w - 1, 0):.1f}" height="{bar_h - 6}" fill="{"#b00020" if over else "#3b6fb6"}"/>'
            f'<rect x="{b_x - 1.5:.1f}" y="{bar_y - 2}" width="3" height="{bar_h + 4}" fill="#111"/>'
            f'<text x="{bar_w + 12}" y="{bar_y + 13}">{row["guaranteed"]} / {row["burst"]} of {row["capacity"]}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def work_pictures(report: AuditReport) -> list[str]:
    """The replay's pictures (`audit --whatif`), drawn as `whatif --pictures` draws them: none when no replay was given."""
    if report.work is None:
        return []
    from fleetops.whatif import pictures

    return [pictures.utilisation(report.work.figures, report.work.window_hours), pictures.waits(report.work.figures)]


def audit(report: AuditReport) -> str:
    charts = {e.name: capacity_chart(e.name, e.capacity) for e in report.environments}
    generated = f"{dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()} (revision time {report.provenance.revision_date})"
    work = work_summary(report.work) if report.work is not None else None
    return _environment().get_template("audit.html.j2").render(r=report, charts=charts, generated=generated, gates=GATE_TITLES,
                                                               work=work, work_pictures=work_pictures(report))
