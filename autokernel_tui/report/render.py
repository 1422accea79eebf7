"""The report as one self-contained HTML page (inline CSS and SVG, no script, no network) or as
Markdown. Every text the agent wrote (descriptions, hypotheses, diffs) is escaped; the page's
Content-Security-Policy forbids scripts and remote loads in any case."""

from __future__ import annotations

import base64
import datetime as _dt
from html import escape
from typing import Any

from autokernel_tui import __version__
from autokernel_tui.report.data import Experiment, KernelSummary, RunReport
from autokernel_tui.report.svg import progress_plot


def _x(v: Any, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _share(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _us(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} us"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _duration(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    s = int(b - a)
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def _interval(lo: Any, hi: Any) -> str:
    return "" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


def device_line(r: RunReport) -> str:
    name = r.device.get("name") or "unknown device"
    return f"{name}" + ("" if r.timing_meaningful else ": timings not meaningful (CPU, Triton interpreter)")


def kernel_rows(r: RunReport) -> list[dict[str, str]]:
    """One row per kernel, as text (shared by HTML and Markdown, and what the tests read)."""
    rows = []
    for k in r.kernels:
        now = k.now or {}
        worst = ""
        if now.get("worst_shape"):
            worst = f"{now['worst_shape']} {_x(now.get('worst_speedup'))}"
        rows.append({
            "kernel": k.task,
            "share": _share(k.share),
            "start": _x(k.start_vs_baseline),
            "now": _x(k.now_vs_baseline) + (" (not re-measured since a revert)" if k.stale_after_revert else ""),
            "worst": worst or "-",
            "vs_compile": _x(now.get("speedup_vs_compile")),
            "vs_start": _x(k.vs_start) if k.keeps else "1.000x (nothing kept)",
            "ci": _interval(k.vs_start_low, k.vs_start_high) or "-",
            "roofline": _pct(now.get("roofline_pct")) if k.timing_meaningful else "-",
            "best_exp": f"exp {k.incumbent.n}" if k.incumbent else "start",
            "experiments": f"{len(k.experiments)} ({', '.join(f'{v} {s}' for s, v in sorted(k.statuses.items()))})"
            if k.experiments else "0",
            "e2e": _x(k.end_to_end),
        })
    return rows


KERNEL_COLUMNS = (
    ("kernel", "kernel"), ("share", "share of model time"), ("start", "start vs baseline"),
    ("now", "best confirmed vs baseline"), ("worst", "worst shape"), ("vs_compile", "vs torch.compile"),
    ("vs_start", "vs starting kernel"), ("ci", "95% CI (product of keeps)"), ("roofline", "% of roofline"),
    ("best_exp", "from"), ("experiments", "experiments"), ("e2e", "end to end (this kernel alone)"),
)

NOTES = (
    "Baseline: the op the model calls (the task's `baseline`, eager), timed by the harness at the task's "
    "shapes; speedups are geomeans over those shapes, medians of timed reps (harness timing method).",
    "Best confirmed: the newest kept experiment (each keep's paired comparison had its 95% CI above "
    "harness.keep_margin, confirmed with the roles swapped); the interval for 'vs starting kernel' is the "
    "product of the keeps' interval ends: conservative, not a 95% CI of the product.",
    "End to end: Amdahl's law with the profile's share of each op; a kernel slower than the op the model "
    "calls counts as 1.00x (it would not be shipped). A prediction, not a measurement: see verify.",
)


def _prediction_lines(r: RunReport) -> list[str]:
    p = r.prediction
    lines = []
    prof = p.profile
    if prof:
        what = ", ".join(f"{k} {prof[k]}" for k in ("batch", "seq", "dtype", "layers") if prof.get(k) not in (None, ""))
        lines.append(f"Profile: {prof.get('model', '?')} on {prof.get('device', '?')} ({what}"
                     f"{', training step' if prof.get('train') else ''}); counted: "
                     f"{'GPU kernel time' if prof.get('time_kind') == 'cuda' else 'CPU op time (a stand-in)'}.")
    if p.speedup is not None:
        parts = " + ".join(f"{share:.3f}/{s:.3f} ({t})" for t, share, s in p.kernels)
        lines.append(f"Predicted end-to-end speedup: {_x(p.speedup)} = 1 / ((1 - {p.covered_share:.3f}) + {parts}); "
                     f"the run's kernels cover {_share(p.covered_share)} of the model's time.")
    if p.missing:
        lines.append("Not in the prediction (no profile share or no measured speedup): " + ", ".join(p.missing) + ".")
    if p.note:
        lines.append(p.note[0].upper() + p.note[1:] + ".")
    if not r.timing_meaningful:
        lines.append("The run's timings come from the CPU interpreter: the prediction means nothing yet.")
    return lines


def _verify_lines(r: RunReport) -> list[str]:
    v = r.verify
    if not v:
        return ["No verify result saved for this run. Run `autokernel-tui verify` in the workspace "
                f"(it saves {r.workspace / '.autokernel' / 'runs' / r.tag / 'verify.json'} when it verifies a "
                "run's kept kernels), or pass `--verify FILE` (a `verify --json FILE` output)."]
    lines = [f"From {r.verify_source}: {v.get('model', '?')} on {v.get('device', '?')}, {v.get('dtype', '?')}, "
             f"batch {v.get('batch', '?')} x seq {v.get('seq', '?')}, {v.get('mode', '')}."]
    lines.append(f"Outputs: {'PASS' if v.get('correct') else 'FAIL'} (rel L2 {v.get('rel_l2_vs_original', 0):.2e} "
                 f"vs the original, tolerance {v.get('tolerance', 0):.1e}).")
    b, a = v.get("before") or {}, v.get("after") or {}
    if b.get("median_us") and a.get("median_us"):
        lines.append(f"Time: {_us(b['median_us'])} -> {_us(a['median_us'])} (median of {a.get('n', '?')}; "
                     f"{v.get('timing_method', '')}).")
    lines.append(f"End to end: measured {_x(v.get('measured_speedup'))}, predicted {_x(v.get('predicted_speedup'))} "
                 "by verify's own profile.")
    if v.get("ship_reason"):
        lines.append(f"Ship: {v['ship_reason']}.")
    if not v.get("timing_meaningful", True):
        lines.append("CPU: the check is real, the timings are not.")
    return lines


def _shape_rows(report: dict | None) -> list[dict]:
    return [s for s in (report or {}).get("shapes") or [] if isinstance(s, dict)]


# --- HTML -------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.meta{color:#555}.note{color:#666;font-size:12px}.warn{color:#a15c00}
.status-keep{color:#1a7f37;font-weight:600}.status-fail,.status-crash,.status-timeout,.status-rejected{color:#b42318}
.status-vetoed,.status-reverted{color:#a15c00}
.diff{overflow-x:auto;border:1px solid #ddd;font-size:12px}.diff pre{margin:0;padding:6px}
.big{font-size:1.3em;font-weight:600}
"""


def _td(text: str, num: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    return f"<td{f' class={chr(34)}{classes}{chr(34)}' if classes else ''}>{escape(text)}</td>"


def _diff_html(diff: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import DiffLexer

    if not diff.strip():
        return '<p class="note">(no diff recorded)</p>'
    return f'<div class="diff">{highlight(diff, DiffLexer(), HtmlFormatter(cssclass="hl"))}</div>'


def _pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".hl")


def _kept_html(k: KernelSummary, e: Experiment) -> str:
    rec = e.record
    parts = [f'<section class="kept" data-exp="{rec.experiment}" data-task="{escape(rec.task)}">',
             f"<h3>exp {rec.experiment} &middot; {escape(rec.task)} &middot; {escape(rec.description)}</h3>",
             '<p class="meta">'
             f"{_x(rec.speedup_vs_incumbent)} vs the incumbent it replaced, 95% CI "
             f"{escape(_interval(rec.ci_low, rec.ci_high) or '-')}"
             f"{' (' + escape(str(e.comparison.get('method'))) + ', ' + str(e.comparison.get('n_samples')) + ' samples)' if e.comparison else ''}"
             f"; {_x(rec.speedup_vs_baseline)} vs baseline; kept by {escape(e.decided_by or '?')}"
             f"{': ' + escape(e.decision_reason) if e.decision_reason else ''}"
             f"; agent {escape(rec.agent)}; commit <code>{escape(rec.commit[:10])}</code></p>"]
    if e.hypothesis:
        parts.append(f'<p><b>Hypothesis:</b> {escape(e.hypothesis)}</p>')
    shapes = _shape_rows(e.report)
    if shapes:
        parts.append("<table><tr><th>shape</th><th>dtype</th><th>median</th><th>p20-p80</th><th>baseline</th>"
                     "<th>vs baseline</th><th>vs compile</th><th>% roofline</th></tr>")
        for s in shapes:
            spread = f"{_us(s.get('p20_us'))} - {_us(s.get('p80_us'))}" if s.get("p20_us") is not None else "-"
            parts.append("<tr>" + _td(str(s.get("shape", ""))) + _td(str(s.get("dtype", ""))) +
                         _td(_us(s.get("median_us")), True) + _td(spread, True) + _td(_us(s.get("baseline_us")), True) +
                         _td(_x(s.get("speedup_vs_baseline")), True) + _td(_x(s.get("speedup_vs_compile")), True) +
                         _td(_pct(s.get("roofline_pct")) if (e.report or {}).get("timing_meaningful") else "-", True) +
                         "</tr>")
        parts.append("</table>")
    parts.append(_diff_html(e.diff))
    parts.append("</section>")
    return "".join(parts)


def html(r: RunReport) -> str:
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "img-src data:\">",
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>autokernel-tui report: run {escape(r.tag)}</title>",
           f"<style>{CSS}{_pygments_css()}</style></head><body>",
           f"<h1>Run {escape(r.tag)}</h1>",
           f'<p class="meta">{escape(str(r.workspace))} &middot; branch <code>autokernel/{escape(r.tag)}</code> &middot; '
           f"{escape(device_line(r))}<br>{escape(_when(r.started))} to {escape(_when(r.ended))} "
           f"({escape(_duration(r.started, r.ended))}) &middot; {escape(r.state)} &middot; policy {escape(r.policy or '-')}"
           f" &middot; agent {escape(r.agent)} &middot; {len(r.experiments)} experiments &middot; "
           f"{r.tokens} tokens &middot; ${r.cost_usd:.2f}</p>"]
    if not r.timing_meaningful:
        out.append('<p class="warn">Timings come from the CPU (Triton interpreter): the checks are real, '
                   "the speedups mean nothing.</p>")
    p = r.prediction
    out.append('<h2 id="summary">Summary</h2>')
    if p.speedup is not None:
        out.append(f'<p class="big" id="e2e-predicted">Predicted end to end: {_x(p.speedup)}</p>')
    out.append('<table id="kernels"><tr>' + "".join(f"<th>{escape(h)}</th>" for _, h in KERNEL_COLUMNS) + "</tr>")
    for row in kernel_rows(r):
        out.append(f'<tr class="kernel" data-task="{escape(row["kernel"])}">' +
                   "".join(_td(row[key], key not in ("kernel", "worst", "best_exp", "experiments")) for key, _ in KERNEL_COLUMNS)
                   + "</tr>")
    out.append("</table>")
    out.append("".join(f'<p class="note">{escape(n)}</p>' for n in NOTES))
    out.append('<h2 id="progress">Progress</h2>')
    out.append(progress_plot(r.kernels))
    out.append('<h2 id="e2e">End-to-end prediction</h2>')
    out.append("".join(f"<p>{escape(line)}</p>" for line in _prediction_lines(r)))
    out.append('<h2 id="verify">Verify</h2>')
    out.append("".join(f"<p>{escape(line)}</p>" for line in _verify_lines(r)))
    if r.verify and r.verify.get("families"):
        out.append("<table><tr><th>family</th><th>share</th><th>before</th><th>after</th><th>kernel</th></tr>")
        for f in r.verify["families"]:
            out.append("<tr>" + _td(str(f.get("family"))) + _td(_share(f.get("share")), True) +
                       _td(_us(f.get("before_us")), True) + _td(_us(f.get("after_us")), True) +
                       _td(_x(f.get("kernel_speedup")), True) + "</tr>")
        out.append("</table>")
    out.append('<h2 id="kept">Kept experiments</h2>')
    kept = [(k, e) for k in r.kernels for e in k.keeps]
    if not kept:
        out.append("<p>Nothing was kept in this run.</p>")
    out.extend(_kept_html(k, e) for k, e in sorted(kept, key=lambda ke: ke[1].n))
    out.append('<h2 id="all">Every experiment</h2><table id="experiments"><tr><th>exp</th><th>kernel</th>'
               "<th>status</th><th>vs incumbent</th><th>95% CI</th><th>vs baseline</th><th>decided by</th>"
               "<th>description</th><th>harness</th></tr>")
    for e in r.experiments:
        rec = e.record
        status = rec.status + (f" (reverted by exp {e.reverted_by})" if e.reverted_by else "")
        harness_line = rec.correctness or ""
        if e.report and e.report.get("reason"):
            harness_line += f": {e.report['reason']}"
        out.append(f'<tr class="exp" data-exp="{rec.experiment}">' + _td(str(rec.experiment), True) + _td(rec.task) +
                   _td(status, cls=f"status-{rec.status}") + _td(_x(rec.speedup_vs_incumbent), True) +
                   _td(_interval(rec.ci_low, rec.ci_high) or "-", True) + _td(_x(rec.speedup_vs_baseline), True) +
                   _td(e.decided_by or "-") + _td(rec.description) + _td(harness_line[:300]) + "</tr>")
    out.append("</table>")
    if r.problems:
        out.append('<h2>Problems reading the run</h2><ul>' + "".join(f"<li>{escape(x)}</li>" for x in r.problems) + "</ul>")
    out.append(f'<p class="note">Written by autokernel-tui {escape(__version__)} at {escape(_when(r.generated_at))} from '
               f"the run's files (results.tsv, reports/, events.jsonl, git). Review each experiment with "
               f"<code>autokernel-tui review</code>.</p></body></html>\n")
    return "".join(out)


# --- Markdown ---------------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _fence(text: str, lang: str = "") -> list[str]:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [ticks + lang, text.rstrip("\n"), ticks]


def markdown(r: RunReport) -> str:
    out = [f"# Run {r.tag}", "",
           f"{r.workspace} · branch `autokernel/{r.tag}` · {device_line(r)}  ",
           f"{_when(r.started)} to {_when(r.ended)} ({_duration(r.started, r.ended)}) · {r.state} · policy "
           f"{r.policy or '-'} · agent {r.agent} · {len(r.experiments)} experiments · {r.tokens} tokens · "
           f"${r.cost_usd:.2f}", ""]
    if not r.timing_meaningful:
        out += ["**Timings come from the CPU (Triton interpreter): the checks are real, the speedups mean nothing.**", ""]
    out += ["## Summary", ""]
    if r.prediction.speedup is not None:
        out += [f"**Predicted end to end: {_x(r.prediction.speedup)}**", ""]
    rows = kernel_rows(r)
    out += _md_table([h for _, h in KERNEL_COLUMNS], [[row[k] for k, _ in KERNEL_COLUMNS] for row in rows])
    out += [""] + [f"- {n}" for n in NOTES] + [""]
    svg = progress_plot(r.kernels)
    out += ["## Progress", "",
            f"![speedup vs baseline by experiment](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})",
            ""]
    out += _md_table(["exp", "kernel", "status", "vs incumbent", "95% CI", "vs baseline", "decided by", "description"],
                     [[str(e.n), e.record.task, e.record.status + (f" (reverted by exp {e.reverted_by})" if e.reverted_by else ""),
                       _x(e.record.speedup_vs_incumbent), _interval(e.record.ci_low, e.record.ci_high) or "-",
                       _x(e.record.speedup_vs_baseline), e.decided_by or "-", e.record.description]
                      for e in r.experiments])
    out += ["", "## End-to-end prediction", ""] + [f"{line}  " for line in _prediction_lines(r)]
    out += ["", "## Verify", ""] + [f"{line}  " for line in _verify_lines(r)]
    out += ["", "## Kept experiments", ""]
    kept = sorted(((k, e) for k in r.kernels for e in k.keeps), key=lambda ke: ke[1].n)
    if not kept:
        out.append("Nothing was kept in this run.")
    for _k, e in kept:
        rec = e.record
        out += [f"### exp {rec.experiment} · {rec.task} · {rec.description}", "",
                f"{_x(rec.speedup_vs_incumbent)} vs the incumbent it replaced, 95% CI "
                f"{_interval(rec.ci_low, rec.ci_high) or '-'}; {_x(rec.speedup_vs_baseline)} vs baseline; kept by "
                f"{e.decided_by or '?'}{': ' + e.decision_reason if e.decision_reason else ''}; commit `{rec.commit[:10]}`", ""]
        if e.hypothesis:
            out += [f"Hypothesis: {e.hypothesis}", ""]
        shapes = _shape_rows(e.report)
        if shapes:
            out += _md_table(["shape", "dtype", "median", "baseline", "vs baseline", "vs compile"],
                             [[str(s.get("shape", "")), str(s.get("dtype", "")), _us(s.get("median_us")),
                               _us(s.get("baseline_us")), _x(s.get("speedup_vs_baseline")),
                               _x(s.get("speedup_vs_compile"))] for s in shapes]) + [""]
        out += _fence(e.diff or "(no diff recorded)", "diff") + [""]
    if r.problems:
        out += ["## Problems reading the run", ""] + [f"- {x}" for x in r.problems] + [""]
    out += ["", f"*Written by autokernel-tui {__version__} at {_when(r.generated_at)} from the run's files.*", ""]
    return "\n".join(out)
