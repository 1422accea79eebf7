"""``autokernel-tui verify [WS] --model M``: the kept kernels inside the model, checked and timed."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace", nargs="?", default=".", metavar="WS",
                        help="workspace whose kernels/<task>/kernel.py files (current checkout) are used")
    parser.add_argument("-C", dest="workspace_flag", metavar="DIR", help="same as WS")
    parser.add_argument("--model", help="model to patch (default: the one the workspace's tasks were extracted from)")
    parser.add_argument("--run", metavar="TAG", help="the run whose kept kernels to use (default: the newest run)")
    parser.add_argument("--kernels", metavar="DIR", help="a kernels folder (<task>/kernel.py + task.toml) instead of WS")
    parser.add_argument("--tasks", help="comma-separated task names to use (default: all)")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--loss", action="store_true",
                        help="inference with the model's loss (an evaluation pass: targets in, the loss out, no "
                             "gradients) instead of the forward alone; the zoo's models")
    parser.add_argument("--train", action="store_true",
                        help="a training step (forward + backward) instead of inference: the loss and every "
                             "parameter's gradient checked, the step timed")
    parser.add_argument("--modes", metavar="M,M",
                        help="modes to measure (inference, or with --train the training step): eager, eager+kernels, compile, compile+kernels, cudagraphs, "
                             "cudagraphs+kernels (default: all on a GPU, none on the CPU)")
    parser.add_argument("--no-select", action="store_true",
                        help="skip choosing which kernels to ship (on a GPU, each kernel is timed alone inside the "
                             "model in the fastest mode, and only those that gain are kept)")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--iters", type=int, help="timed iterations (default 30 on a GPU, 3 on the CPU)")
    parser.add_argument("--json", metavar="FILE", help="write the full result as JSON")


def main(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from autokernel_tui.profiling.patch import use_interpreter_if_no_gpu
    from autokernel_tui.profiling.quiet import filtered_stderr, terminal_stderr

    use_interpreter_if_no_gpu(args.device)
    from autokernel_tui.profiling.verify import (VerifyError, chosen_kernels, format_result, format_training,
                                                 model_args_from_tasks, verify)

    kdir, where, kernels = chosen_kernels(args)
    print(f"kernels from {where}")
    saved = model_args_from_tasks(kdir)
    model = args.model or saved.get("model")
    if not model:
        raise VerifyError("name the model: --model MODEL (the workspace's tasks do not record one)")
    pick = lambda flag, key: flag if flag is not None else (saved.get(key) if model == saved.get("model") else None)  # noqa: E731
    from autokernel_tui.progress import Progress

    # The progress bar goes straight to the terminal; the profiler's native chatter on fd 2 is filtered.
    with terminal_stderr() as err, Progress(f"verify {model}", stream=err) as progress, filtered_stderr():
        result = verify(model, kernels, batch=pick(args.batch, "batch"), seq=pick(args.seq, "seq"),
                        dtype=pick(args.dtype, "dtype"), device=args.device, train=args.train, loss=args.loss,
                        layers=pick(args.layers, "layers"), iters=args.iters, progress=progress,
                        select=not args.no_select,
                        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()) if args.modes else None)
    print(format_training(result) if "gradients" in result else format_result(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    if not args.kernels and where.startswith("run "):  # a run's kept kernels: the morning report shows it
        from autokernel_tui.report.paths import verify_path

        path = verify_path(args.workspace_flag or args.workspace, where.split()[1])
        if path.parent.is_dir():
            path.write_text(json.dumps(result, indent=1), encoding="utf-8")
            print(f"saved for `autokernel-tui report`: {path}")
    return 0 if result["correct"] else 1
