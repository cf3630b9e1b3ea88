"""Charts as SVG text, drawn on the server: bars per time slot, lines of latency, state bars and a
task's dependencies. No script and no external asset; every text is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from ..domain.models import Task
from ..service.overview import Window

WIDTH, HEIGHT = 560, 160
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 48, 22, 12


@dataclass(frozen=True)
class Series:
    """A named row of values (None: no value) in one colour (a CSS class)."""

    name: str
    css: str
    values: Sequence[float | None]


def _scale(top: float) -> float:
    """A round upper bound at or above ``top``."""
    if top <= 0:
        return 1.0
    step = 1.0
    while step * 10 < top:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= top:
            return step * factor
    return step * 10


def _label(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2g}"


def _frame(title: str, top: float, labels: Sequence[str], unit: str) -> list[str]:
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for i in range(3):
        y = PAD_TOP + plot_h * i / 2
        value = top * (2 - i) / 2
        out.append(
            f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{PAD_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(_label(value))}{escape(unit) if i == 0 else ''}</text>"
        )
    step = max(1, len(labels) // 6)
    slot_w = (WIDTH - PAD_LEFT) / max(1, len(labels))
    for i in range(0, len(labels), step):
        x = PAD_LEFT + slot_w * i
        out.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}">{escape(labels[i])}</text>')
    return out


def _legend(series: Sequence[Series]) -> str:
    parts = []
    x = PAD_LEFT + 4
    for s in series:
        parts.append(
            f'<rect class="{s.css}" x="{x}" y="2" width="8" height="8"/>'
            f'<text class="axis" x="{x + 11}" y="10">{escape(s.name)}</text>'
        )
        x += 14 + 7 * len(s.name)
    return "".join(parts)


def stacked_bars(title: str, labels: Sequence[str], series: Sequence[Series]) -> str:
    """Bars per slot, the series stacked; the axis scaled to the tallest stack."""
    slots = len(labels)
    totals = [sum(s.values[i] or 0 for s in series) for i in range(slots)]
    top = _scale(max(totals, default=0))
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    slot_w = (WIDTH - PAD_LEFT) / max(1, slots)
    out = _frame(title, top, labels, "")
    for i in range(slots):
        base = 0.0
        for s in series:
            value = s.values[i] or 0
            if value <= 0:
                continue
            h = plot_h * value / top
            y = PAD_TOP + plot_h - plot_h * base / top - h
            x = PAD_LEFT + slot_w * i + 1
            out.append(
                f'<rect class="{s.css}" x="{x:.1f}" y="{y:.1f}" width="{slot_w - 2:.1f}" '
                f'height="{h:.1f}"><title>{escape(labels[i])}: {escape(s.name)} '
                f"{value:g}</title></rect>"
            )
            base += value
    out.append(_legend(series))
    out.append("</svg>")
    return "".join(out)


def lines(title: str, labels: Sequence[str], series: Sequence[Series], unit: str) -> str:
    """One line per series, a dot at each slot that has a value."""
    slots = len(labels)
    present = [v for s in series for v in s.values if v is not None]
    top = _scale(max(present, default=0))
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    slot_w = (WIDTH - PAD_LEFT) / max(1, slots)
    out = _frame(title, top, labels, unit)
    for s in series:
        points = []
        for i, value in enumerate(s.values):
            if value is None:
                continue
            x = PAD_LEFT + slot_w * (i + 0.5)
            y = PAD_TOP + plot_h - plot_h * value / top
            points.append((x, y, value, labels[i]))
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _v, _l in points)
            out.append(f'<polyline class="{s.css}" points="{path}"/>')
        for x, y, value, label in points:
            out.append(
                f'<circle class="{s.css}" cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>'
                f"{escape(label)}: {escape(s.name)} {value:.3g}{escape(unit)}</title></circle>"
            )
    if not present:
        out.append(
            f'<text class="axis" x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" '
            'text-anchor="middle">nothing ended in this window</text>'
        )
    out.append(_legend(series))
    out.append("</svg>")
    return "".join(out)


def window_charts(win: Window) -> tuple[str, str]:
    """The throughput and the latency chart of one window."""
    fmt = "%H:%M"
    labels = [s.start.strftime(fmt) for s in win.slots]
    ends = stacked_bars(
        f"Tasks ended per {win.slot_secs // 60} min, {win.name}",
        labels,
        [
            Series("completed", "s-ok", [s.completed for s in win.slots]),
            Series("other ends", "s-bad", [s.other_ends for s in win.slots]),
        ],
    )
    latency = lines(
        f"Latency, {win.name} (s)",
        labels,
        [
            Series("wait p50", "s-wait50", [s.wait_p50 for s in win.slots]),
            Series("wait p99", "s-wait99", [s.wait_p99 for s in win.slots]),
            Series("run p50", "s-run50", [s.run_p50 for s in win.slots]),
            Series("run p99", "s-run99", [s.run_p99 for s in win.slots]),
        ],
        "s",
    )
    return ends, latency


def depth_bars(counts: Sequence[tuple[str, int]]) -> str:
    """Horizontal bars, one per state."""
    row_h = 18
    height = row_h * len(counts) + 8
    top = max((n for _s, n in counts), default=0) or 1
    out = [
        f'<svg class="chart depth" viewBox="0 0 {WIDTH} {height}" role="img" '
        'aria-label="Tasks by state" xmlns="http://www.w3.org/2000/svg">',
        "<title>Tasks by state</title>",
    ]
    for i, (state, n) in enumerate(counts):
        y = 4 + row_h * i
        w = max((WIDTH - 230) * n / top, 1.0 if n else 0.0)
        out.append(
            f'<text class="axis" x="110" y="{y + 12}" text-anchor="end">{escape(state)}</text>'
            f'<rect class="st-{escape(state)}" x="116" y="{y + 2}" width="{w:.1f}"'
            f' height="{row_h - 5}"/>'
            f'<text class="axis" x="{120 + w:.1f}" y="{y + 12}">{n:,}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def dependency_graph(task: Task, upstream: Sequence[Task], missing: Sequence[str]) -> str:
    """The task and the tasks it depends on, each box linked to its page and coloured by its
    state; an arrow from each dependency to the task."""
    box_w, box_h, gap = 200, 34, 10
    deps: list[tuple[str, str, str]] = [(str(t.id), t.title, t.state.value) for t in upstream] + [
        (m, "(not visible)", "unknown") for m in missing
    ]
    rows = max(1, len(deps))
    height = rows * (box_h + gap) + gap
    tx, ty = WIDTH - box_w - 10, height / 2 - box_h / 2
    out = [
        f'<svg class="chart graph" viewBox="0 0 {WIDTH} {height:.0f}" role="img" '
        'aria-label="Dependencies" xmlns="http://www.w3.org/2000/svg">',
        "<title>Dependencies</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>',
    ]
    for i, (dep_id, title, state) in enumerate(deps):
        y = gap + i * (box_h + gap)
        out.append(
            f'<line class="edge" x1="{10 + box_w}" y1="{y + box_h / 2}" x2="{tx}" '
            f'y2="{ty + box_h / 2:.1f}" marker-end="url(#arrow)"/>'
        )
        out.append(_box(dep_id, title, state, 10, y, box_w, box_h))
    out.append(_box(str(task.id), task.title, task.state.value, tx, ty, box_w, box_h))
    out.append("</svg>")
    return "".join(out)


def _box(task_id: str, title: str, state: str, x: float, y: float, w: int, h: int) -> str:
    short = title if len(title) <= 28 else title[:27] + "…"
    return (
        f'<a href="/tasks/{escape(task_id)}"><rect class="node st-{escape(state)}" x="{x}" '
        f'y="{y:.1f}" width="{w}" height="{h}" rx="4"/>'
        f'<text class="nodetext" x="{x + 6}" y="{y + 14:.1f}">{escape(short)}</text>'
        f'<text class="axis" x="{x + 6}" y="{y + 28:.1f}">{escape(state)}</text></a>'
    )
