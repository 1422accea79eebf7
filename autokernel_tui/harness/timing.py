"""Timing (worker side).

GPU: CUDA events around each call, L2 flushed before each rep, fresh input
contents every rep (so caching cannot help), warm-up first, then median and
p20/p80. CPU: wall clock around the interpreted call; the numbers are labelled
not meaningful upstream.
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from autokernel_tui.harness import stats

GPU_MIN_REPS = 10
GPU_MAX_REPS = 40
GPU_BUDGET_US = 20_000.0  # GPU time per timed function per config
CPU_REPS = 4  # one of them is the checked (untimed) rep


@dataclass
class Samples:
    times_us: list[float]
    checked: tuple | None = None  # (inputs, outputs) of the rep whose output is checked afterwards

    @property
    def median(self) -> float:
        return stats.median(self.times_us)

    def pcts(self) -> tuple[float, float, float]:
        return stats.percentile(self.times_us, 20), self.median, stats.percentile(self.times_us, 80)


# The flush also keeps the GPU busy while the host enqueues the start event and launches
# kernel_fn. Seen on the H200 (2026-12-02): with a 2 x L2 (~100 MB, ~25 us) flush the
# harness timed rmsnorm 8192x768 at 28.9 us, where kernel_quality.py, flushing 256 MiB
# (~65 us), timed the same kernel at 11.9 us. (HOST_LEAD_CYCLES now covers the host.)
MIN_FLUSH_BYTES = 256 << 20


# Before each flush the GPU spins this long (~100 us), so the host gets ahead of it and
# the timed call is already queued when its start event fires. Without it, a kernel_fn
# whose Python side (argument checks, allocation, Triton's launcher) outlasts the flush
# is timed with the GPU idling for the host. Seen on the H200 (2026-12-02): rmsnorm
# 4096x4096 timed 45 us median, p20-p80 36-60 us, beside 22 us for eager.
HOST_LEAD_CYCLES = 200_000


class L2Flusher:
    """Reads a buffer of at least twice the size of L2 (and 256 MiB) before each rep.

    A read, not a write: zeroing the buffer would leave L2 full of dirty lines, and
    the timed kernel would pay for writing them back to HBM as its own misses evict
    them, up to an L2's worth of traffic that is not the kernel's (measured on the
    H200: 4-5 us of a 27 us swiglu). The flush also writes back what the previous
    rep left dirty, outside the timed region.
    """

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        size = max(2 * int(getattr(props, "L2_cache_size", 0) or 0), MIN_FLUSH_BYTES)
        self.words = torch.empty(size // 4, dtype=torch.float32, device=device)
        self.total = torch.empty((), dtype=torch.float32, device=device)

    def __call__(self) -> None:
        torch.cuda._sleep(HOST_LEAD_CYCLES)
        torch.sum(self.words, dim=0, out=self.total)


def reps_for(estimate_us: float) -> int:
    if estimate_us <= 0:
        return GPU_MAX_REPS
    return int(min(GPU_MAX_REPS, max(GPU_MIN_REPS, GPU_BUDGET_US / estimate_us)))


def time_gpu_interleaved(fns: list[Callable], make_inputs: Callable[[], tuple], flush: L2Flusher,
                         n_reps: int | None, check_rep: int | None = None, warmup: int = 2,
                         spy: Callable[[], Any] | None = None) -> list[Samples]:
    """Time each fn in ``fns`` on the same fresh inputs every rep, interleaved (A B A B ...).

    The rep ``check_rep`` runs under ``spy()`` (the op recorder) and its output is kept
    for a correctness check; that rep's time is left out of the samples.
    """
    for _ in range(warmup):
        inputs = make_inputs()
        for fn in fns:
            fn(*inputs)
    if n_reps is None:
        inputs = make_inputs()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        s.record()
        fns[0](*inputs)
        e.record()
        torch.cuda.synchronize()
        n_reps = reps_for(s.elapsed_time(e) * 1000.0)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(n_reps)] for _ in fns]
    checked: list[tuple | None] = [None] * len(fns)
    with no_gc():
        _enqueue_reps(fns, make_inputs, flush, n_reps, check_rep, spy, events, checked)
    torch.cuda.synchronize()
    return [Samples([s.elapsed_time(e) * 1000.0 for r, (s, e) in enumerate(events[i]) if r != check_rep],
                    checked[i]) for i in range(len(fns))]


@contextlib.contextmanager
def no_gc():
    """A cyclic-GC pass (tens of ms with torch and triton loaded) in the middle of the reps
    would stall the host longer than HOST_LEAD_CYCLES covers: none until the reps are queued."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _enqueue_reps(fns, make_inputs, flush, n_reps, check_rep, spy, events, checked) -> None:
    for r in range(n_reps):
        inputs = make_inputs()
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            flush()
            start, end = events[i][r]
            if r == check_rep:
                recorder = spy() if spy else contextlib.nullcontext()
                with recorder:
                    out = fns[i](*inputs)
                checked[i] = (inputs, out, recorder)
                continue
            start.record()
            out = fns[i](*inputs)
            end.record()
            del out


def time_cpu_interleaved(fns: list[Callable], make_inputs: Callable[[], tuple], n_reps: int = CPU_REPS,
                         check_rep: int | None = None, spy: Callable[[], Any] | None = None) -> list[Samples]:
    """Wall clock around each call; the checked rep runs under ``spy()`` and is not timed."""
    times: list[list[float]] = [[] for _ in fns]
    checked: list[tuple | None] = [None] * len(fns)
    warm = make_inputs()
    for fn in fns:  # warm-up calls (first-call costs are not the kernel's speed)
        fn(*warm)
        fn(*warm)
    for r in range(n_reps):
        inputs = make_inputs()
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            if r == check_rep:
                recorder = spy() if spy else contextlib.nullcontext()
                with recorder:
                    out = fns[i](*inputs)
                checked[i] = (inputs, out, recorder)
                continue
            t0 = time.perf_counter()
            fns[i](*inputs)
            times[i].append((time.perf_counter() - t0) * 1e6)
    return [Samples(times[i], checked[i]) for i in range(len(fns))]
