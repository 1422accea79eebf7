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


def render(report) -> str:
    """The compact text report (also used by tests)."""
    lines = []
    head = f"{report.task}  {report.status}"
    if report.status != "PASS":
        head += f" at {report.stage}: {report.reason}"
    if report.device:
        head += f"   [{report.device}{'' if report.timing_meaningful else ': timings not meaningful'}]"
    lines.append(head)
    if report.shapes:
        lines.append(f"  {'shape':<16}{'dtype':<10}{'median us':>11}{'p20-p80 us':>19}{'eager us':>11}"
                     f"{'x eager':>9}{'x compile':>10}{'GB/s':>8}{'TFLOP/s':>9}{'%roof':>7}{'rel_l2':>9}")
        for r in report.shapes:
            spread = f"{_us(r.p20_us)}-{_us(r.p80_us)}" if r.p20_us is not None else "-"
            lines.append(f"  {r.shape[:15]:<16}{r.dtype:<10}{_us(r.median_us):>11}{spread:>19}"
                         f"{_us(r.baseline_us):>11}{_num(r.speedup_vs_baseline):>9}"
                         f"{_num(r.speedup_vs_compile):>10}{_num(r.gbps):>8}{_num(r.tflops):>9}"
                         f"{_fmt(r.roofline_pct, '.1f'):>7}{_fmt(r.rel_l2_err, '.1e'):>9}")
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
