"""``autokernel-tui report [WS] [--run TAG] [-o FILE] [--format html|md] [--verify FILE]``: one
self-contained file of a run for the morning (HTML by default, Markdown with ``--format md``)."""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--run", metavar="TAG", help="the run to report on (default: the newest run)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where to write it (default: report.html or report.md in the run's folder, "
                             ".autokernel/runs/<TAG>/; - for standard output)")
    parser.add_argument("--format", choices=("html", "md"), default=None,
                        help="html (default; inline SVG plot, coloured diffs, no network) or md (Markdown); "
                             "default from -o's suffix")
    parser.add_argument("--verify", metavar="FILE",
                        help="a `verify --json FILE` result to include (default: the run's saved verify.json)")


def main(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from autokernel_tui.ledger import paths
    from autokernel_tui.report.data import collect
    from autokernel_tui.report.render import html, markdown

    ws = common.workspace_of(args)
    fmt = args.format or ("md" if args.output and args.output.lower().endswith((".md", ".markdown")) else "html")
    report = collect(ws, args.run, args.verify)
    text = markdown(report) if fmt == "md" else html(report)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output) if args.output else paths.run_dir(ws, report.tag) / f"report.{fmt}"
    out.write_text(text, encoding="utf-8")
    kept = sum(len(k.keeps) for k in report.kernels)
    pred = report.prediction.speedup
    print(f"report of run {report.tag}: {len(report.experiments)} experiments, {kept} kept"
          + (f", predicted end to end {pred:.3f}x" if pred else "") + f" -> {out}")
    for line in report.problems[:5]:
        print(f"  warning: {line}", file=sys.stderr)
    return 0
