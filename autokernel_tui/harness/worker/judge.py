"""The judge: the trusted worker process the runner talks to (torch + triton + stdlib only).

Started by ``harness.runner`` (inside bwrap where available) as ``python -m
autokernel_tui.harness.worker.judge --req-fd R --resp-fd W ...``. It picks the
device without initialising CUDA, forks the zygote (so contestants start from an
interpreter that has never touched CUDA or candidate code), then initialises
CUDA for itself and answers framed JSON requests on its private pipe:
``info``, ``prepare`` (ceilings and baselines), ``evaluate`` and ``compare``
(kernel sources as text). Its environment holds no secrets; it exits when the
runner goes away.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path


def _pick_device(requested: str) -> str:
    # Ask NVML, not the CUDA runtime: a CUDA context in this process before the zygote forks
    # would leave every contestant unable to use the GPU.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import torch
    try:
        available = torch.cuda.is_available()
    finally:  # only for this question: inside the sandbox NVML may not start, and a contestant
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # must not ask it again
    if requested == "cuda" or (requested == "auto" and available):
        if not available:
            raise SystemExit("harness judge: --device cuda but no CUDA device is available")
        if not os.environ.get("AUTOKERNEL_FORCE_INTERPRET"):
            os.environ.pop("TRITON_INTERPRET", None)
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"  # must be set before Triton is imported
    return "cpu"


def _watch_parent() -> None:
    """Exit with the runner: the request pipe's EOF is seen only between requests."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(4)

    threading.Thread(target=watch, name="judge-parent-watch", daemon=True).start()


def _handle(state, message: dict) -> dict:
    from autokernel_tui.harness.worker.errors import Verdict
    from autokernel_tui.harness.worker.stages import Evaluation
    op = message.get("op")
    if op == "info":
        return {"ok": True, "info": state.info()}
    if op == "prepare":
        from autokernel_tui.harness.worker.ceilings import ensure_ceilings
        ensure_ceilings(state)
        ev = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick")))
        for shape, dtype in ev.configs:
            ev.baseline(shape, dtype)
        return {"ok": True}
    if op == "evaluate":
        def evaluate() -> dict:
            t0 = time.perf_counter()
            report = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick"))).run(message["source"])
            report.wall_s = time.perf_counter() - t0
            return {"ok": True, "report": report.to_dict(), "replaced": state.pool.replaced}
        return _retaken_if_out_of_memory(state, evaluate)
    if op == "compare":
        def compare() -> dict:
            ev = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick")))
            try:
                result = ev.compare(message["candidate"], message["incumbent"], message.get("measure", "device"))
            except Verdict as v:
                return {"ok": True, "status": v.status, "reason": v.reason, "stage": v.stage,
                        "replaced": state.pool.replaced}
            return {"ok": True, "status": "PASS", **result, "replaced": state.pool.replaced}
        return _retaken_if_out_of_memory(state, compare)
    return {"ok": False, "error": f"unknown op {op!r}"}


def _says_out_of_memory(reply: dict) -> bool:
    reason = (reply.get("report") or {}).get("reason") if "report" in reply else reply.get("reason")
    from autokernel_tui.harness.worker.errors import OUT_OF_MEMORY
    return OUT_OF_MEMORY in (reason or "")


def _retaken_if_out_of_memory(state, attempt) -> dict:
    """An evaluation that ran out of GPU memory (in the judge, or the contestant beside it) is taken again
    once after the judge drops every cached input and reference: the judge and a contestant share the
    card, and a big task's inputs kept from an earlier task are the usual cause (KernelBench on an 80 GB
    H100, run 12). Out of memory again: said as such, in one line, not as a harness bug."""
    from autokernel_tui.harness.worker import memory
    from autokernel_tui.harness.worker.errors import OUT_OF_MEMORY, describe
    if not state.cuda:
        return attempt()
    try:
        reply = attempt()
        if not _says_out_of_memory(reply):
            return reply
    except BaseException as exc:  # noqa: BLE001 - only out of memory is retaken
        if not memory.is_out_of_memory(exc):
            raise
    state.forget_tasks()
    try:
        return attempt()
    except BaseException as exc:  # noqa: BLE001
        if not memory.is_out_of_memory(exc):
            raise
        state.forget_tasks()
        return {"ok": False, "reason": f"{OUT_OF_MEMORY} in the judge, also after dropping every cached input "
                                       f"and trying again: {describe(exc)} ({memory.state()})"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autokernel_tui.harness.worker.judge")
    parser.add_argument("--req-fd", type=int, required=True)
    parser.add_argument("--resp-fd", type=int, required=True)
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--scratch", required=True, help="folder for task copies and contestants' scratch")
    parser.add_argument("--cache", required=True, help="folder for Triton caches (one per kernel source)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a contestant gets per evaluation")
    parser.add_argument("--memory-limit-mb", type=float, default=64 * 1024.0)
    parser.add_argument("--landlock", action="store_true", help="confine contestants with Landlock")
    parser.add_argument("--private-shm", action="store_true",
                        help="this process's /dev/shm is its own (bwrap's tmpfs): contestants may write it")
    parser.add_argument("--read-roots", default="[\"/\"]", help="JSON list: what a contestant may read")
    parser.add_argument("--sandbox", default="", help="what confines this process (said in every report)")
    args = parser.parse_args(argv)
    _watch_parent()
    device = _pick_device(args.device)

    import torch  # noqa: F401 - warm: imported once, kept
    import triton  # noqa: F401
    from autokernel_tui.harness import protocol
    from autokernel_tui.harness.sandbox import landlock
    from autokernel_tui.harness.worker.pool import ContestantPool
    from autokernel_tui.harness.worker.stages import JudgeState
    from autokernel_tui.harness.worker.zygote import _PR_SET_DUMPABLE, prctl

    use_landlock = args.landlock and landlock.abi_version() > 0
    pool = ContestantPool(device, Path(args.scratch), Path(args.cache), timeout_s=args.timeout,
                          memory_limit_mb=args.memory_limit_mb, landlock=use_landlock, private_shm=args.private_shm,
                          read_roots=json.loads(args.read_roots), spares=2)
    prctl(_PR_SET_DUMPABLE, 0)  # no contestant reads or patches the judge's memory
    sandbox = args.sandbox
    if args.landlock and not use_landlock:
        sandbox += "; Landlock unavailable on this kernel: contestants can write wherever the sandbox lets them"
    state = JudgeState(device, pool, sandbox.strip("; "))
    pool.fill_spares()
    from autokernel_tui.harness.worker import check_kernels
    check_kernels.warm(torch.device(device))  # the fused check compiled before the first evaluation's clock
    protocol.send(args.resp_fd, {"ok": True, "ready": True, "info": state.info(), "pid": os.getpid()})
    try:
        while True:
            message = protocol.recv(args.req_fd)
            if message is None or message.get("op") == "exit":
                return 0
            try:
                reply = _handle(state, message)
            except BaseException as exc:  # noqa: BLE001 - report, never die silently
                print("".join(traceback.format_exception(exc)), file=sys.stderr, flush=True)
                reply = {"ok": False, "error": (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0]}
                if "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError":
                    reply["restart"] = True  # the judge's own context is unsafe now
            sys.stdout.flush()
            sys.stderr.flush()
            protocol.send(args.resp_fd, reply)
            if reply.get("restart"):
                return 3
    finally:
        pool.close()


if __name__ == "__main__":
    sys.exit(main())
