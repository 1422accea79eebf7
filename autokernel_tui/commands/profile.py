"""``autokernel-tui profile MODEL``: profile a model and rank its op families by Amdahl's law.

The profiler's native chatter (``gpuGetDeviceCount failed with code 35`` on a machine without a
GPU, Kineto's stage markers) is kept off the terminal (``profiling.quiet``); anything else on
stderr still shows.
"""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser, model_required: bool = True) -> None:
    """The model flags shared by profile and verify."""
    kw = {} if model_required else {"nargs": "?", "default": None}
    parser.add_argument("model", metavar="MODEL", **kw,
                        help="gpt2 | llama | bert | resnet | vit | t5 (or -tiny), hf:ClassName, file.py:factory, "
                             "or a KernelBench file.py")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: per model)")
    parser.add_argument("--seq", type=int, default=None,
                        help="sequence length; the image side for resnet and vit (default: per model)")
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                        help="model dtype (default bfloat16 on a GPU, float32 on the CPU)")
    parser.add_argument("--train", action="store_true", help="profile a training step (forward + backward)")
    parser.add_argument("--layers", type=int, default=None, help="number of layers (zoo models)")
    parser.add_argument("--device", default="auto", help="auto | cuda | cpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="write the full profile (ranked) as JSON")
    parser.add_argument("--steps", type=int, default=None, help="profiled steps (default 5 on a GPU, 2 on the CPU)")
    parser.add_argument("--top", type=int, default=20, help="rows to print")


def main(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from autokernel_tui.profiling.amdahl import format_table
    from autokernel_tui.profiling.pipeline import run_profile
    from autokernel_tui.profiling.quiet import filtered_stderr, terminal_stderr
    from autokernel_tui.progress import Progress

    # The progress bar goes straight to the terminal; the profiler's native chatter on fd 2 is filtered.
    with terminal_stderr() as err, Progress(f"profile {args.model}", stream=err) as progress, filtered_stderr():
        profile = run_profile(args.model, args.batch, args.seq, args.dtype, args.train, args.layers, args.device,
                              args.steps, progress=progress)
    print(format_table(profile, limit=args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(profile, indent=1), encoding="utf-8")
        print(f"profile written to {args.json} (use: autokernel-tui init --from-profile {args.json})")
    return 0
