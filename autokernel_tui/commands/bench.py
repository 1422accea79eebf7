"""``autokernel-tui bench kernels/<task>``: check and time one task's kernel.py.

Prints a compact report, optionally writes it as JSON, and exits 0 only when the
candidate is correct. Imports only argparse at module level (see cli.py).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", nargs="?", default=".", help="task folder (holds task.toml, reference.py, kernel.py)")
    parser.add_argument("--json", metavar="FILE", help="write the full report as JSON to FILE")
    parser.add_argument("--quick", action="store_true", help="first dtype only (faster, less thorough)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="hard limit per evaluation in seconds (default: settings harness.timeout_s)")


def _fmt(value, spec: str = ".3g", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _us(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _num(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


# (header, left-aligned?) for each column of the per-shape table.
SHAPE_COLUMNS = (("shape", True), ("dtype", True), ("median us", False), ("p20-p80 us", False),
                 ("host us", False), ("eager us", False), ("eager host", False), ("x eager", False),
                 ("x compile", False), ("GB/s", False), ("TFLOP/s", False), ("%roof", False), ("rel_l2", False),
                 ("note", True))


def table(rows: list[list[str]], columns=SHAPE_COLUMNS, indent: str = "  ", gap: str = "  ") -> list[str]:
    """Rows of cells under their headers, every column as wide as its widest cell: a long shape
    name or a long number widens its column instead of running into the next one."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, (h, _) in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return indent + gap.join(c.ljust(w) if left else c.rjust(w)
                                 for c, w, (_, left) in zip(cells, widths, columns)).rstrip()
    return [line([h for h, _ in columns])] + [line(r) for r in rows]


def render(report) -> str:
    """The compact text report (also used by tests)."""
    from autokernel_tui.harness.report import caution

    lines = []
    head = f"{report.task}  {report.status}"
    if report.status != "PASS":
        head += f" at {report.stage}: {report.reason}"
    if report.device:
        head += f"   [{report.device}{'' if report.timing_meaningful else ': timings not meaningful'}]"
    lines.append(head)
    if report.shapes:
        # host us: the host's work per call with the GPU kept ahead (an eager model pays it when it
        # exceeds the device time: "host-bound"); the interpreter's host time is the computation itself.
        meaningful = report.timing_meaningful is not False
        rows = [[r.shape, r.dtype, _us(r.median_us),
                 f"{_us(r.p20_us)}-{_us(r.p80_us)}" if r.p20_us is not None else "-",
                 _us(r.host_us) if meaningful else "-", _us(r.baseline_us),
                 _us(r.baseline_host_us) if meaningful else "-", _num(r.speedup_vs_baseline),
                 _num(r.speedup_vs_compile), _num(r.gbps), _num(r.tflops), _fmt(r.roofline_pct, ".1f"),
                 _fmt(r.rel_l2_err, ".1e"),
                 caution(r.disturbed, r.host_us, r.median_us) if meaningful else ""] for r in report.shapes]
        lines.extend(table(rows))
    s = report.summary
    if s is not None:
        parts = [f"geomean {_us(s.latency_us)} us", f"x{_num(s.speedup_vs_baseline)} vs eager"]
        if s.speedup_vs_compile is not None:
            parts.append(f"x{_num(s.speedup_vs_compile)} vs torch.compile")
        if s.roofline_pct is not None:
            parts.append(f"{s.roofline_pct:.1f}% of roofline")
        parts.append(f"worst {s.worst_shape} x{_num(s.worst_speedup)}")
        lines.append("  summary (over shapes): " + ", ".join(parts))
    if report.shapes:
        lines.append(f"  JIT compile {report.compile_s:.2f} s (not in the times above); wall {report.wall_s:.2f} s"
                     + (f"; peak VRAM {report.peak_vram_mib:.0f} MiB" if report.peak_vram_mib else ""))
    if report.sandbox:
        lines.append(f"  sandbox: {report.sandbox}")
    if report.status in ("CRASH", "TIMEOUT") and report.stderr_tail.strip():
        tail = [ln for ln in report.stderr_tail.splitlines() if ln.strip()][-3:]
        lines.extend(f"  | {ln[:200]}" for ln in tail)
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from autokernel_tui.config import load_settings
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.tasks.spec import load_spec

    task_dir = Path(args.task)
    load_spec(task_dir)  # a broken task folder: one line, exit 2
    settings = load_settings(None)
    timeout = args.timeout if args.timeout is not None else settings.harness.timeout_s
    from autokernel_tui.progress import evaluate_with_progress

    with Harness(timeout_s=timeout, device=args.device, keep_margin=settings.harness.keep_margin,
                 sandbox=settings.harness.sandbox) as harness:
        report = evaluate_with_progress(harness, task_dir, quick=args.quick or settings.harness.quick)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return 0 if report.status == "PASS" else 1
