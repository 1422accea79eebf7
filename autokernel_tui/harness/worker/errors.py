"""The exception that stops an evaluation with a verdict, and one-line reasons (stdlib only)."""

from __future__ import annotations


class Verdict(Exception):
    """Stop the stages here: ``status`` (FAIL/CRASH/REJECTED...), the ``stage`` and a one-line reason."""

    def __init__(self, status: str, stage: str, reason: str, restart: bool = False, retake: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.stage = stage
        self.reason = reason
        self.restart = restart  # the process that raised it is unsafe now (e.g. a poisoned CUDA context)
        self.retake = retake  # a timing-based accusation: the timing is retaken once before it stands


def one_line(text: str, limit: int = 240) -> str:
    """The first line (and the last, if there are several) of ``text``, at most ``limit`` characters."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return line if len(line) <= limit else line[: limit - 3] + "..."


# How a verdict says the GPU ran out of memory; the judge retakes an evaluation whose reason says it
OUT_OF_MEMORY = "out of GPU memory"


def out_of_memory_in_disguise(exc: BaseException) -> bool:
    """torch's caching allocator, out of GPU memory, asks NVML which processes hold memory; where NVML
    does not start (the sandbox) that ends in an internal assert instead of the OutOfMemoryError (seen on
    the H200, run 11: "NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at
    .../CUDACachingAllocator.cpp"; an H100, run 19, in ``nvmlDeviceGetHandleByPciBusId_v2_``: any NVML
    call the allocator's report makes)."""
    text = str(exc)
    return "NVML_SUCCESS" in text and "CUDACachingAllocator" in text


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line, an out-of-memory error said as one whatever torch raised."""
    if out_of_memory_in_disguise(exc):
        return ("CUDA out of memory (torch's own report of it failed: it asks NVML, which does not start in "
                "the sandbox)")
    return one_line(f"{type(exc).__name__}: {exc}")
