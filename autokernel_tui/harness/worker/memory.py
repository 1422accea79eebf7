"""How much memory the harness's caches and batches may hold: shares of the card, not fixed sizes.

The judge and a contestant share one GPU, and the judge also builds the float64 reference of a
checked output (twice the bytes of a float32 input and output). Fixed sizes (24 GB of cached inputs
per task in the judge and in the contestant, 8 GB per timed batch) fitted the H200's 141 GB but ran
KernelBench's 6 GB problems out of memory on an 80 GB H100 (run 12, 4 of 6 problems). The shares below
leave about half the card for references, outputs and the kernel's own workspace.
"""
from __future__ import annotations

import gc

import torch

from autokernel_tui.harness.worker.errors import out_of_memory_in_disguise

# shares of the card's memory
JUDGE_CACHE_SHARE = 0.20  # the judge's cached base inputs, over every task it keeps
CONTESTANT_CACHE_SHARE = 0.12  # a contestant's cached base inputs
BATCH_SHARE = 0.08  # inputs + outputs a contestant holds for one timed batch
# A warm contestant between evaluations (up to four are kept): the base inputs it may keep for its next
# evaluation. Run 13 (H200): a warm contestant held 51 GB beside a judge that needed 12 GB more.
IDLE_SHARE = 0.02
CPU_BYTES = {"judge": 4 << 30, "contestant": 512 << 20, "batch": 256 << 20, "idle": 64 << 20}
_SHARES = {"judge": JUDGE_CACHE_SHARE, "contestant": CONTESTANT_CACHE_SHARE, "batch": BATCH_SHARE,
           "idle": IDLE_SHARE}
# A card with less than this share free is short of memory: only then does a contestant between
# evaluations give its cached inputs and its allocator's free blocks back. Doing it always cost a warm
# rmsnorm evaluation 3.4 s (H200, run 13: 5.9 s where 1.7 s was usual); a 6 GB problem gets there.
TIGHT_SHARE = 0.25


def card_bytes() -> int:
    return int(torch.cuda.get_device_properties(0).total_memory)


def budget(device: str, what: str) -> int:
    """Bytes for ``what`` ("judge", "contestant", "batch" or "idle") on ``device``."""
    if device != "cuda":
        return CPU_BYTES[what]
    return int(_SHARES[what] * card_bytes())


def release_cached() -> None:
    """Give freed blocks back to the driver, so the other process on the card can have them."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def short() -> bool:
    """Whether the card has less than TIGHT_SHARE of its memory free (for every process on it)."""
    if not torch.cuda.is_initialized():
        return False
    free, total = torch.cuda.mem_get_info()
    return free < TIGHT_SHARE * total


def state() -> str:
    """What this process and the card hold, for an out-of-memory reason (cudaMemGetInfo: no NVML)."""
    if not torch.cuda.is_initialized():
        return ""
    try:
        free, total = torch.cuda.mem_get_info()
        return (f"this process {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated, "
                f"{torch.cuda.memory_reserved() / 2**30:.1f} GiB reserved; the card {free / 2**30:.1f} GiB free "
                f"of {total / 2**30:.1f}")
    except RuntimeError as exc:  # a context too broken to ask
        return f"memory state unknown ({type(exc).__name__})"


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or out_of_memory_in_disguise(exc)
