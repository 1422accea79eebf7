"""Load, profile and rank a model: the profile dict ``profile`` prints and ``init --from-profile`` reads.

Torch is imported inside the functions (through ``zoo``, ``capture``), so importing this is free.
"""

from __future__ import annotations


def default_dtype(dtype: str | None, device: str) -> str:
    if dtype:
        return dtype
    from autokernel_tui.profiling.zoo import resolve_device

    return "bfloat16" if resolve_device(device).startswith("cuda") else "float32"


def run_profile(model: str, batch=None, seq=None, dtype=None, train=False, layers=None, device="auto",
                steps=None, progress=None) -> dict:
    """Load, profile and rank a model: the profile dict the CLI prints and extraction reads.
    ``progress(stage, done, total, left_s)``: see ``autokernel_tui.progress``."""
    from autokernel_tui.profiling.amdahl import rank
    from autokernel_tui.profiling.capture import profile_bundle
    from autokernel_tui.profiling.zoo import load_model
    from autokernel_tui.progress import nothing, step_reporter

    say = progress or nothing
    say(f"loading {model}")
    bundle = load_model(model, batch=batch, seq=seq, dtype=default_dtype(dtype, device), device=device,
                        train=train, layers=layers)
    profile = rank(profile_bundle(bundle, steps=steps, on_step=step_reporter(say)))
    profile["model_args"]["device"] = device
    return profile
