"""The harness worker: a warm process that runs candidate code (torch + triton + stdlib only).

Started by ``harness.runner`` as ``python -m autokernel_tui.harness.worker
--req-fd R --resp-fd W --device D`` in its own process group. It imports torch,
picks the device, sets the Triton interpreter up on a CPU-only box, imports
Triton, and then answers framed JSON requests on its private pipe until told
to exit. Candidate output goes to stdout/stderr, which the runner keeps as a log.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path


def _pick_device(requested: str) -> str:
    import torch
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit("harness worker: --device cuda but no CUDA device is available")
        if not os.environ.get("AUTOKERNEL_FORCE_INTERPRET"):
            os.environ.pop("TRITON_INTERPRET", None)
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"  # must be set before Triton is imported
    return "cpu"


def _handle(state, message: dict) -> tuple[dict, bool]:
    """One request -> (reply, restart_after_reply)."""
    from autokernel_tui.harness.evaluate import Evaluation
    from autokernel_tui.harness.errors import Verdict
    op = message.get("op")
    if op == "info":
        return {"ok": True, "info": state.info()}, False
    if op == "prepare":
        from autokernel_tui.harness.ceilings import ensure_ceilings
        ensure_ceilings(state)
        ev = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick")))
        for shape, dtype in ev.configs:
            ev.baseline(shape, dtype)
        # torch.compile may have imported inductor, which rebinds a few torch attributes:
        # harness code only ran here, so the trusted identities are taken afresh.
        from autokernel_tui.harness.guards import IdentitySnapshot
        state.snapshot = IdentitySnapshot()
        return {"ok": True}, False
    if op == "evaluate":
        t0 = time.perf_counter()
        ev = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick")))
        report, restart = ev.run(Path(message["kernel_path"]))
        report.wall_s = time.perf_counter() - t0
        return {"ok": True, "report": report.to_dict()}, restart
    if op == "compare":
        ev = Evaluation(state, Path(message["task_dir"]), bool(message.get("quick")))
        try:
            result = ev.compare(Path(message["candidate_path"]), Path(message["incumbent_path"]))
        except Verdict as v:
            return {"ok": True, "status": v.status, "reason": v.reason, "stage": v.stage}, v.restart
        return {"ok": True, "status": "PASS", **result}, False
    return {"ok": False, "error": f"unknown op {op!r}"}, False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autokernel_tui.harness.worker")
    parser.add_argument("--req-fd", type=int, required=True)
    parser.add_argument("--resp-fd", type=int, required=True)
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    args = parser.parse_args(argv)
    device = _pick_device(args.device)

    import torch  # noqa: F401 - warm: imported once, kept
    import triton  # noqa: F401
    from autokernel_tui.harness import protocol
    from autokernel_tui.harness.evaluate import WorkerState
    import autokernel_tui.harness.ceilings  # noqa: F401 - loaded before the identity snapshot

    state = WorkerState(device)
    protocol.send(args.resp_fd, {"ok": True, "ready": True, "info": state.info(), "pid": os.getpid()})
    while True:
        message = protocol.recv(args.req_fd)
        if message is None or message.get("op") == "exit":
            return 0
        try:
            reply, restart = _handle(state, message)
        except BaseException as exc:  # noqa: BLE001 - report, never die silently
            text = "".join(traceback.format_exception(exc))
            print(text, file=sys.stderr, flush=True)
            # A CUDA error outside a guarded call still poisons the context: start afresh.
            restart = "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"
            reply = {"ok": False, "error": (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0]}
        sys.stdout.flush()
        sys.stderr.flush()
        reply["restart"] = restart
        protocol.send(args.resp_fd, reply)
        if restart:
            return 3


if __name__ == "__main__":
    sys.exit(main())
