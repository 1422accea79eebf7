"""Measured GPU ceilings, taken once per GPU x torch version and cached on disk (worker side).

Copy bandwidth: a 1 GiB device-to-device copy (read + write). Matmul rate: an
8192^3 product per dtype through torch (cuBLAS), float32 both as true FP32 and
as TF32. Medians over CUDA-event timed repetitions.
"""

from __future__ import annotations

import torch

from autokernel_tui.harness import roofline, stats


def _median_ms(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return stats.median(times)


def measure() -> dict:
    n_bytes = 1 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src))
    out = {"bandwidth_gbps": 2 * n_bytes / (ms * 1e6), "tflops": {}, "method": "copy 1 GiB; matmul 8192^3"}
    del src, dst
    n = 8192
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for key, dtype, tf32 in (("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False),
                                 ("float32", torch.float32, False), ("tf32", torch.float32, True)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ms = _median_ms(lambda: a @ b, reps=5)
            out["tflops"][key] = 2 * n**3 / (ms * 1e9)
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    torch.cuda.empty_cache()
    return out


def ensure_ceilings(state) -> None:
    if not state.cuda or state.measured:
        return
    state.measured = measure()
    roofline.save_measured(state.device_name, torch.__version__, state.measured)
