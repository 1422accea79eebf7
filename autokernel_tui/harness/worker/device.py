"""CUDA started in a worker, with the device count taken from CUDA itself.

torch counts devices through NVML first, and once CUDA is up it keeps that count for good (torch
2.11). Inside the sandbox NVML may fail to start (then torch asks the CUDA runtime: fine) or start
and see no device: on the H200 (run 9) it answered 0 while the CUDA runtime, already up, answered 1,
whenever the process that started the harness ran under pytest or had itself called cuInit or started
NVML, and every candidate crashed with "Invalid device id". Once CUDA is up its own count is the true
one (newer torch asks it, not NVML, from then on), so that is the count kept; with it, each of those
runners' candidates PASSed (`benchmarks/results/h200-run9/`).
"""

from __future__ import annotations

import os

import torch


def start_cuda() -> None:
    """Initialise CUDA in this process (a context on the current device) and pin the device count."""
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context now, not in the first timed call
    runtime = torch._C._cuda_getDeviceCount()
    if torch.cuda.device_count() != runtime and hasattr(torch.cuda, "_cached_device_count"):
        torch.cuda._cached_device_count = runtime
    try:
        torch.cuda.get_device_properties(torch.cuda.current_device())
    except AssertionError:  # "Invalid device id": say what each source of the count answered
        raise RuntimeError(device_count_story()) from None


def device_count_story() -> str:
    def ask(fn) -> str:
        try:
            return str(fn())
        except Exception as exc:  # noqa: BLE001 - a diagnosis: every answer is worth printing
            return f"{type(exc).__name__}: {exc}"
    nvml = getattr(torch.cuda, "_device_count_nvml", lambda: "not asked (no such function in this torch)")
    return ("CUDA started but torch counts no usable device: device_count() " + ask(torch.cuda.device_count)
            + ", CUDA runtime " + ask(torch._C._cuda_getDeviceCount) + ", NVML " + ask(nvml)
            + f", CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
            + f", current device {ask(torch.cuda.current_device)}")
