"""Run one starter at one shape a few times, for Nsight Compute to profile.

    ncu --clock-control none -k regex:_rmsnorm --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python3 benchmarks/ncu_probe.py [--run starter|eager|compile] rmsnorm wide bfloat16 [KNOB=VALUE ...]

--run eager runs the task's reference instead (cuBLAS for matmul), --run
compile the reference under torch.compile as the harness and kernel_quality.py
compile it (timing.compile_reference: default mode; Inductor's Triton kernels:
match them with -k regex:triton_), to profile what the starter is measured against.
Inputs are the judge's (inputs.InputBuilder: make_inputs at seed 0).
KNOB=VALUE sets a module-level knob of kernel.py first (to profile a setting
against the default without editing the file). The first calls compile and
warm up (skip them with --launch-skip, or profile only the last call, made
inside a cudaProfilerStart/Stop range, with --profile-from-start off); every call is the starter's real
kernel_fn on the task's own inputs for that shape.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import starters_check as sc  # noqa: E402


RUNS = ("starter", "eager", "compile")


def main(argv: list[str]) -> int:
    run = "starter"
    if argv[:1] == ["--run"]:
        run, argv = (argv[1] if len(argv) > 1 else ""), argv[2:]
        if run not in RUNS:
            raise SystemExit(f"--run takes one of {', '.join(RUNS)}")
    if len(argv) < 3 or not all("=" in a for a in argv[3:]):
        raise SystemExit("usage: ncu_probe.py [--run starter|eager|compile] TASK SHAPE DTYPE [KNOB=VALUE ...]")
    task, shape_name, dtype_name = argv[:3]
    import torch

    from autokernel_tui.tasks.spec import load_spec

    task_dir = sc.REPO / "kernels" / task
    spec = load_spec(task_dir)
    shape = next((s for s in spec.shapes if s.name == shape_name), None)
    if shape is None:
        raise SystemExit(f"{task} has no shape {shape_name!r}: {', '.join(s.name for s in spec.shapes)}")
    ref = sc.load_reference(task_dir, "ncu")
    ker = sc.load_module(task_dir / "kernel.py", "ncu")
    for name, value in (a.split("=", 1) for a in argv[3:]):
        if not isinstance(getattr(ker, name, None), int):
            raise SystemExit(f"{task}'s kernel.py has no int knob {name}")
        setattr(ker, name, int(value))
    inputs = sc.build_inputs(ref, shape.dims, dtype_name, "cuda", 0)
    if run == "compile":  # compiled as the harness and kernel_quality.py compile it (default mode)
        from autokernel_tui.harness.worker.timing import compile_reference

        compiled = compile_reference(ref.reference, inputs)
        if compiled.fn is None:
            raise SystemExit(f"torch.compile of {task}'s reference: {compiled.note}")
        fn = compiled.fn
    else:
        fn = ker.kernel_fn if run == "starter" else ref.reference
    for _ in range(4):
        fn(*inputs)
    torch.cuda.synchronize()
    # One more call inside a profiler range: `ncu --profile-from-start off` sees only it (and
    # no autotuning launch); without that flag the range is a no-op and --launch-skip decides.
    torch.cuda.profiler.start()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
