"""The progress plot as an inline SVG: no dependency, no script, no network.

x: experiment number (0 = the starting kernel); y: the candidate's speedup vs the baseline (the op
the model calls, geomean over the task's shapes). One point per experiment, one colour per kernel:
kept experiments filled, the others hollow, failed ones (no timing) as a cross on the x axis; a
step line follows each kernel's incumbent. Every point carries ``data-exp``, ``data-task``,
``data-status`` and ``data-speedup`` and a ``<title>`` (the browser's tooltip).
"""

from __future__ import annotations

import math
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
WIDTH, HEIGHT = 760, 320
LEFT, RIGHT, TOP, BOTTOM = 56, 150, 16, 40


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + 1e-12:
        out.append(round(v, 10))
        v += step
    return out


def progress_plot(kernels, experiment_count: int | None = None) -> str:
    """``kernels``: ``data.KernelSummary`` list. Returns one ``<svg>`` element."""
    series = []
    ys: list[float] = [1.0]
    for i, k in enumerate(kernels):
        colour = COLOURS[i % len(COLOURS)]
        start = k.start_vs_baseline
        points = []
        for e in k.experiments:
            if e.record.status == "reverted":
                continue
            y = e.record.speedup_vs_baseline
            points.append((e.n, y, e.record.status, e.kept, e.record.description))
            if y is not None:
                ys.append(y)
        if start is not None:
            ys.append(start)
        series.append((k.task, colour, start, points))
    n_max = max([p[0] for _, _, _, pts in series for p in pts] + [experiment_count or 0, 1])
    y_lo, y_hi = min(ys), max(ys)
    pad = (y_hi - y_lo) * 0.08 or 0.1
    y_lo, y_hi = max(0.0, y_lo - pad), y_hi + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(n: float) -> float:
        return LEFT + plot_w * n / n_max

    def sy(v: float) -> float:
        return TOP + plot_h * (1 - (v - y_lo) / (y_hi - y_lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="progress-plot" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="speedup vs baseline by experiment">',
           '<style>.ax{stroke:#888;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}.lbl{font:11px sans-serif;'
           'fill:#444}.one{stroke:#555;stroke-dasharray:4 3}</style>',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#bbb"/>']
    for v in _ticks(y_lo, y_hi):
        y = sy(v)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="lbl" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}x</text>')
    for n in _ticks(0, n_max, min(10, n_max)):
        if n != int(n):
            continue
        x = sx(n)
        out.append(f'<line class="ax" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}"/>'
                   f'<text class="lbl" x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{int(n)}</text>')
    if y_lo <= 1.0 <= y_hi:
        out.append(f'<line class="one" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{sy(1.0):.1f}" y2="{sy(1.0):.1f}"/>'
                   f'<text class="lbl" x="{LEFT + plot_w - 4}" y="{sy(1.0) - 4:.1f}" text-anchor="end">'
                   'baseline (the op the model calls)</text>')
    out.append(f'<text class="lbl" x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">experiment '
               '(0 = starting kernel)</text>')
    out.append(f'<text class="lbl" transform="translate(12 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
               'speedup vs baseline (geomean over shapes)</text>')
    for i, (task, colour, start, points) in enumerate(series):
        # The incumbent's step line: from the start, up at each kept experiment.
        level = start
        path = []
        if level is not None:
            path.append(f"M{sx(0):.1f},{sy(level):.1f}")
        for n, y, _status, kept, _ in points:
            if kept and y is not None:
                if level is None:
                    path.append(f"M{sx(n):.1f},{sy(y):.1f}")
                else:
                    path.append(f"H{sx(n):.1f}V{sy(y):.1f}")
                level = y
        if level is not None and path:
            path.append(f"H{sx(n_max):.1f}")
            out.append(f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="1.5" '
                       f'stroke-opacity="0.6" class="incumbent" data-task="{escape(task)}"/>')
        if start is not None:
            out.append(f'<rect class="start" data-task="{escape(task)}" x="{sx(0) - 4:.1f}" y="{sy(start) - 4:.1f}" '
                       f'width="8" height="8" fill="{colour}"><title>{escape(task)}: starting kernel '
                       f'{start:.3f}x vs baseline</title></rect>')
        for n, y, status, kept, desc in points:
            attrs = (f'class="pt {escape(status)}{" kept" if kept else ""}" data-exp="{n}" data-task="{escape(task)}" '
                     f'data-status="{escape(status)}" data-speedup="{"" if y is None else f"{y:.4f}"}"')
            title = (f"<title>exp {n} {escape(task)} {escape(status)}: "
                     f"{'no timing' if y is None else f'{y:.3f}x vs baseline'} - {escape(desc)}</title>")
            if y is None:
                x0, y0 = sx(n), TOP + plot_h - 6
                out.append(f'<g {attrs}><path d="M{x0 - 4:.1f},{y0 - 4:.1f}l8,8m0,-8l-8,8" stroke="{colour}" '
                           f'stroke-width="1.5"/>{title}</g>')
            else:
                fill = colour if kept else "#fff"
                out.append(f'<circle {attrs} cx="{sx(n):.1f}" cy="{sy(y):.1f}" r="{5 if kept else 3.5}" '
                           f'fill="{fill}" stroke="{colour}" stroke-width="1.5">{title}</circle>')
        ly = TOP + 14 + 18 * i
        lx = LEFT + plot_w + 14
        out.append(f'<circle cx="{lx}" cy="{ly - 4}" r="5" fill="{colour}"/>'
                   f'<text class="lbl" x="{lx + 10}" y="{ly}">{escape(task)}</text>')
    ly = TOP + 14 + 18 * len(series) + 8
    lx = LEFT + plot_w + 14
    out.append(f'<text class="lbl" x="{lx - 5}" y="{ly}">filled: kept</text>'
               f'<text class="lbl" x="{lx - 5}" y="{ly + 14}">hollow: not kept</text>'
               f'<text class="lbl" x="{lx - 5}" y="{ly + 28}">x: failed (no timing)</text>')
    out.append("</svg>")
    return "".join(out)
