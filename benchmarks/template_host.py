"""Host time per call of the GEMM template's wrappers (`_gemm`, `_bmm`, `_conv`), this tree against a base
revision's (issue 21: the Python a generated kernel adds to each call an eager model makes).

    python3 benchmarks/template_host.py [--base REV] [--device cpu|cuda] [--json OUT]

Method. Each revision's TILE + GEMM + CONV parts are written to a file and imported (as a generated
kernel.py holds them). On the CPU (default) every Triton launch is replaced by a stub that returns at once,
so the figure is the wrapper's own Python and torch calls (allocations, views, the channels-last copies);
with ``--device cuda`` the launches are real and the figure is the wall time of back-to-back calls with one
synchronize at the end, i.e. what a model pays per call where the host is the bottleneck (small shapes).
Each figure: median over --repeat runs of --calls calls, microseconds per call; both revisions measured
alternately, run by run, in one process. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autokernel_tui.harness.worker.loading import load_text  # noqa: E402

KERNELS = ("_gemm_kernel", "_gemv_kernel", "_gemv_sum_kernel", "_conv_kernel", "_conv_split_sum")


class _StubLaunch:
    """kernel[grid](...) that does nothing: the wrapper's host work alone."""

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **meta):
        return None


def load_template(source_module: str, name: str, stub: bool):
    """The wrappers of a gemm_template.py's text, as the module a generated kernel.py would be."""
    ns: dict = {}
    exec(compile(source_module, "gemm_template.py", "exec"), ns)  # the template's strings, not its kernels
    text = "import torch\nimport triton\nimport triton.language as tl\n" + ns["TILE"] + ns["GEMM"] + ns["CONV"]
    module = load_text(text, name)
    if stub:
        for k in KERNELS:
            setattr(module, k, _StubLaunch())
    return module


def cases(device: str, dtype: torch.dtype) -> dict:
    """Small shapes, where a model's call is host-bound: name -> a call of the wrapper."""
    g = torch.Generator(device=device).manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g, device=device).to(dtype)

    a, b, bias, col = r(64, 256), r(256, 384), r(384), r(256, 1)
    x, y = r(12, 64, 64), r(12, 64, 64)
    img, w = r(2, 64, 14, 14), r(64, 64, 3, 3)
    few, wf = r(2, 3, 32, 32), r(16, 3, 3, 3)
    return {
        "gemm + bias 64x256x384": lambda m: m._gemm(a, b, bias),
        "gemv 64x256": lambda m: m._gemm(a, col, None),
        "bmm 12x64x64x64": lambda m: m._bmm(x, y),
        "conv 64ch 14x14 3x3": lambda m: m._conv(img, w, None, (1, 1), (1, 1), (1, 1)),
        "conv 3ch 32x32 3x3": lambda m: m._conv(few, wf, None, (1, 1), (1, 1), (1, 1)),
    }


def per_call_us(call, module, calls: int, device: str) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        call(module)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD~1", help="the revision to compare against (git rev)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    stub = args.device == "cpu"
    rel = "autokernel_tui/profiling/gemm_template.py"
    base_text = subprocess.run(["git", "show", f"{args.base}:{rel}"], cwd=ROOT, check=True, capture_output=True,
                               text=True).stdout
    modules = {"base": load_template(base_text, "template_base", stub),
               "this": load_template((ROOT / rel).read_text(), "template_this", stub)}
    rows = []
    for name, call in cases(args.device, getattr(torch, args.dtype)).items():
        for m in modules.values():  # warm: plans made, kernels compiled
            for _ in range(3):
                call(m)
        times: dict = {k: [] for k in modules}
        for _ in range(args.repeat):
            for k, m in modules.items():
                times[k].append(per_call_us(call, m, args.calls, args.device))
        base, this = statistics.median(times["base"]), statistics.median(times["this"])
        rows.append(dict(case=name, base_us=round(base, 2), this_us=round(this, 2), saved_us=round(base - this, 2)))
    if args.json:
        args.json.write_text(json.dumps(dict(device=args.device, stub=stub, base=args.base, dtype=args.dtype,
                                             rows=rows), indent=1))
    what = "wrapper Python, launches stubbed" if stub else "back-to-back calls, real launches"
    print(f"template host us per call ({args.device}, {args.dtype}, {what}; base {args.base} vs this tree)")
    print(f"{'case':<26} {'base':>8} {'this':>8} {'saved':>8}")
    for r in rows:
        print(f"{r['case']:<26} {r['base_us']:>8.1f} {r['this_us']:>8.1f} {r['saved_us']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
