"""A contestant: the one process that runs a candidate's kernel.py (worker side).

Forked by the zygote, it first initialises the device (a spare, ready before it
is needed), then waits to be assigned one kernel source. On assignment it
confines itself with Landlock (writes only to its scratch folder and its own
Triton cache), loads the task's ``reference.py`` for ``make_inputs`` only, and
imports the candidate. From then on it answers the judge's requests on its
socket: build inputs from a recipe, call ``kernel_fn`` under the runtime
guards, hand outputs over, time calls with the one timer, fingerprint them.

Nothing this process says is trusted: the judge checks every output against
its own reference, verifies the fingerprints of timed calls, and compares the
time it measures from outside with the times reported here. The guards below
are a first filter that gives honest mistakes a clear reason early.
"""

from __future__ import annotations

import os
import random
import resource
import socket
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Callable

import torch

from autokernel_tui.harness import protocol
from autokernel_tui.harness.worker import guards, inputs as inputs_mod, memory, transfer
from autokernel_tui.harness.worker.correctness import as_tuple, check_inputs_unchanged, check_structure, \
    snapshot_inputs
from autokernel_tui.harness.worker.device import start_cuda
from autokernel_tui.harness.worker.errors import OUT_OF_MEMORY, Verdict, describe, one_line
from autokernel_tui.harness.worker.loading import load_module
from autokernel_tui.harness.worker.reference import load_reference
from autokernel_tui.harness.worker.timing import L2Flusher, time_as_called, time_reps, warm_up

FILE_SIZE_LIMIT = 8 << 30


def candidate_error(exc: BaseException, where: str, stage: str) -> Verdict:
    """Classify an exception raised by candidate code."""
    msg = describe(exc)
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return Verdict("CRASH", stage, f"{where}: candidate tried to exit the worker ({type(exc).__name__})")
    text = str(exc)
    if "CUDA error" in text or "illegal memory access" in text or type(exc).__name__ == "AcceleratorError":
        return Verdict("CRASH", stage, f"{where}: {msg} (CUDA context poisoned)", restart=True)
    if memory.is_out_of_memory(exc):
        return Verdict("FAIL", stage, f"{where}: {OUT_OF_MEMORY}: {msg} ({memory.state()})")
    return Verdict("FAIL", stage, f"{where}: kernel_fn raised {msg}")


def harness_error(op: object, exc: BaseException) -> str:
    """The reason for an error outside the candidate's calls. Out of memory says so in the words the judge
    retakes an evaluation on (its inputs built while idle contestants and the judge's caches held the card:
    every experiment after the ninth of run 21's flash attention tuner CRASHed so, none retaken)."""
    if memory.is_out_of_memory(exc):
        return one_line(f"contestant error in {op}: {OUT_OF_MEMORY}: {describe(exc)} ({memory.state()})", limit=400)
    return one_line(f"contestant error in {op}: {describe(exc)}", limit=400)


class Contestant:
    def __init__(self, sock: socket.socket, device: str) -> None:
        self.sock = sock
        self.device = device
        self.cuda = device == "cuda"
        self.fn: Callable | None = None
        self.builder: inputs_mod.InputBuilder | None = None
        self.sets: dict[str, tuple] = {}
        self.last: tuple = ()
        self.batch: list[tuple] = []
        self.scratch: Path | None = None
        self.transfer = "torch"
        self.flusher: L2Flusher | None = None
        self.launches = guards.LaunchCounter()
        self.snapshot: guards.IdentitySnapshot | None = None
        self.watched: frozenset[str] = frozenset()  # the candidate files registered with guards

    # Requests ----------------------------------------------------------------------------
    def assign(self, msg: dict) -> dict:
        self.scratch = Path(msg["scratch"])
        self.transfer = str(msg.get("transfer", "torch"))  # how CUDA outputs travel (transfer.WAYS)
        # Every cache this process may fill is its own: nothing it writes is read by another kernel.
        os.environ["TRITON_CACHE_DIR"] = msg["triton_cache"]
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.scratch / "inductor")
        os.environ["AUTOKERNEL_CACHE_DIR"] = os.environ["HOME"] = os.environ["TMPDIR"] = str(self.scratch)
        # Python keeps the temporary folder it first found (a spare's warm-up compiled in the pool's shared
        # scratch, where Landlock then forbids writes: Triton's .ptx for the candidate failed there, run 18).
        tempfile.tempdir = str(self.scratch)
        # A candidate that writes without end (its stdout is the harness log) is stopped by SIGXFSZ.
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        sandbox = "landlock off"
        if msg.get("landlock"):
            from autokernel_tui.harness.sandbox import landlock
            try:
                sandbox = landlock.restrict(msg.get("read_roots", ["/"]), msg["write_roots"]).describe()
            except OSError as exc:
                sandbox = f"landlock failed: {exc}"
        self.setup(Path(msg["task_dir"]), self.scratch)
        self.load(Path(msg["kernel_path"]))
        return {"sandbox": sandbox}

    def setup(self, task_dir: Path, scratch: Path) -> None:
        """The task's inputs and the runtime guards, before any candidate code is loaded."""
        self.scratch = scratch
        if self.cuda:
            self.flusher = L2Flusher(torch.device("cuda"))
        ref = load_reference(task_dir)
        self.builder = inputs_mod.InputBuilder(ref, self.device, memory.budget(self.device, "contestant"))
        self.launches.install()
        self.snapshot = guards.IdentitySnapshot()

    def load(self, path: Path) -> None:
        guards.watch_candidate_code(path)
        self.watched = frozenset({str(path)})
        threads = guards.live_threads()
        try:
            module = load_module(path, "kernel")
        except BaseException as exc:  # noqa: BLE001 - candidate code: anything can come out
            raise Verdict("FAIL", "static", f"import failed: {one_line(f'{type(exc).__name__}: {exc}')}")
        self._after_candidate_code("static", "importing kernel.py", threads)
        fn = getattr(module, "kernel_fn", None)
        if not callable(fn):
            raise Verdict("FAIL", "static", "kernel.py has no callable kernel_fn")
        self.fn = fn

    def _after_candidate_code(self, stage: str, where: str, threads_before: int) -> None:
        changed = self.snapshot.changed() if self.snapshot else []
        if not guards.watched_files_intact(self.watched):
            changed.append("the harness's list of candidate files")
        if changed or not self.launches.hooks_intact():
            name = changed[0] if changed else "the Triton launch hook"
            raise Verdict("REJECTED", stage, f"{where}: replaced {name} (patching timers or the harness)")
        if guards.live_threads() > threads_before:
            raise Verdict("REJECTED", stage, f"{where}: started a thread (work the timer would miss)")

    def call(self, msg: dict) -> dict:
        """One guarded call on the inputs of ``msg['set']`` (built from ``msg['recipe']`` unless kept)."""
        if self.builder is None:  # its assignment failed (said then, with the cause): no call can run
            raise RuntimeError("this contestant was never set up for a task (its assignment failed)")
        key = msg["set"]
        # The recipe (a stability transform's name, say) is gone before candidate code runs, the inputs kept
        # for the judge's next call on them, and no stage named: the judge names it in its verdicts.
        recipe = msg.pop("recipe", None)
        if recipe is not None:
            self.sets[key] = self.builder.build(recipe)
        del recipe
        inputs = self.sets[key]
        where, stage = msg["where"], ""
        before = snapshot_inputs(inputs)
        launches = self.launches.count
        guards.watch_candidate_code(self.fn)
        threads = guards.live_threads()
        recorder = guards.OpRecorder(poison=True)
        self.last = ()
        t0 = time.perf_counter()
        try:
            with recorder:
                out = self.fn(*inputs)
            if self.cuda:
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            raise candidate_error(exc, where, stage) from None
        elapsed = time.perf_counter() - t0
        self._after_candidate_code(stage, where, threads)
        self._check_ops(recorder, where, stage, msg.get("forbidden_ops", ()))
        if self.launches.count == launches:
            raise Verdict("REJECTED", stage, f"{where}: kernel_fn launched no Triton kernel")
        outs = as_tuple(out)
        check_structure(outs, msg["expected"], inputs, where, stage)
        check_inputs_unchanged(before, inputs, where, stage)
        self.last = outs
        if msg.get("fingerprint_seed") is not None:  # the judge wants only fingerprints of these outputs
            return {"elapsed_s": elapsed, "fingerprints": inputs_mod.fingerprints(outs, int(msg["fingerprint_seed"]))}
        return {"elapsed_s": elapsed, "outputs": transfer.export(outs, self.scratch, "last", self.transfer)}

    @staticmethod
    def _check_ops(recorder: guards.OpRecorder, where: str, stage: str, forbidden_ops) -> None:
        bad = recorder.forbidden()
        if bad:
            named = [op for op in bad if op in set(forbidden_ops)]
            op = (named or bad)[0]
            why = "the task's own PyTorch op" if named else "a PyTorch compute op"
            raise Verdict("REJECTED", stage, f"{where}: kernel_fn calls {op} ({why}): the work must be done in Triton")

    def refill(self, msg: dict) -> dict:
        inputs_mod.refill_(self.sets[msg["set"]], self.builder.build(msg["recipe"]))
        return {}

    def time(self, msg: dict) -> dict:
        """Time ``kernel_fn`` once per recipe; the outputs are kept for ``fingerprint_batch``.

        One more call, untimed and at a random place among the timed ones, runs under the op
        recorder: a kernel that reaches for PyTorch only after the correctness stages is named.
        """
        self.batch = []
        # Every set built, and the recipes dropped, before any candidate code runs: a batch may hold an
        # adversarial set (a stability transform) and the candidate must not tell which from its recipe.
        recipes = msg.pop("recipes")
        sets = [self.builder.build(r) for r in recipes]
        split = random.randrange(len(sets) + 1)
        spied = self.builder.build(recipes[split % len(sets)])
        del recipes
        launches = self.launches.count
        threads = guards.live_threads()
        where = msg["where"]
        recorder = guards.OpRecorder(poison=False)
        try:
            if msg.get("warmup"):
                warm_up(self.fn, sets[0], int(msg["warmup"]))
            lead = max(0.0, float(msg.get("lead_us") or 0.0))
            before, outs = time_reps(self.fn, sets[:split], self.flusher, lead)
            with recorder:
                self.fn(*spied)
            after, more = time_reps(self.fn, sets[split:], self.flusher, lead)
        except BaseException as exc:  # noqa: BLE001
            raise candidate_error(exc, f"{where} (timing)", "timing") from None
        self._after_candidate_code("timing", f"{where} (timed run)", threads)
        self._check_ops(recorder, f"{where} (timed run)", "timing", msg.get("forbidden_ops", ()))
        if self.launches.count - launches < len(sets) + 1:
            raise Verdict("REJECTED", "timing", f"{where} (timed run): some timed calls launched no Triton kernel")
        self.batch = [as_tuple(o) for o in outs + more]
        for rep in self.batch:  # (a lazy tensor would do its work when fingerprinted, after the clock stopped)
            if any(type(t) is not torch.Tensor for t in rep):
                raise Verdict("REJECTED", "timing", f"{where} (timed run): an output is not a plain torch.Tensor "
                              "(tensor subclass or lazy output)")
        return {"times_us": before.times_us + after.times_us, "host_us": before.host_us + after.host_us}

    def time_as_called(self, msg: dict) -> dict:
        """Back-to-back calls, as an eager model makes them (informational: never decides a keep)."""
        sets = [self.builder.build(r) for r in msg["recipes"]]
        try:
            per_call = time_as_called(self.fn, sets)
        except BaseException as exc:  # noqa: BLE001
            raise candidate_error(exc, f"{msg['where']} (as called)", "timing") from None
        del sets
        if memory.short():  # their blocks back to the driver, for the judge's process on the same card
            memory.release_cached()
        return {"as_called_us": per_call}

    def fingerprint_batch(self, msg: dict) -> dict:
        # Every rep's, though the judge checks a few: it is never told which, so work put off past the
        # timed calls must be done for all of them, inside the judge's clock (asking for the checked reps
        # alone would save most of the 0.43 s it takes of a warm rmsnorm evaluation, H100, and let that work
        # shrink to one rep's).
        seed = int(msg["seed"])
        return {"fingerprints": inputs_mod.fingerprint_batch(self.batch, seed)}

    def fetch_rep(self, msg: dict) -> dict:
        return {"outputs": transfer.export(self.batch[int(msg["rep"])], self.scratch, f"rep{int(msg['rep'])}",
                                           self.transfer)}

    def drop(self, msg: dict) -> dict:
        self.batch, self.last = [], ()
        if msg.get("sets"):
            self.sets.clear()
        if memory.short():  # the batch's blocks back to the driver; kept warm (idle): hold little besides
            if msg.get("idle") and self.builder is not None:
                self.builder.trim(memory.budget(self.device, "idle"))
            memory.release_cached()
        return {}

    # read-only: a candidate that could put its own handler here would answer the judge in the harness's place
    HANDLERS = types.MappingProxyType({
        "assign": assign, "call": call, "refill": refill, "time": time, "time_as_called": time_as_called,
        "fingerprint_batch": fingerprint_batch, "fetch_rep": fetch_rep, "drop": drop})

    # Loop --------------------------------------------------------------------------------
    def serve(self) -> int:
        fd = self.sock.fileno()
        while True:
            message = protocol.recv(fd)
            if message is None or message.get("op") == "exit":
                return 0
            handler = self.HANDLERS.get(message.get("op"))
            try:
                if handler is None:
                    raise ValueError(f"unknown op {message.get('op')!r}")
                reply = {"ok": True, **handler(self, message)}
            except Verdict as v:
                reply = {"ok": False, "status": v.status, "stage": v.stage, "reason": v.reason}
            except BaseException as exc:  # noqa: BLE001 - a harness bug or a candidate's trick: say so, die
                print("".join(traceback.format_exception(exc)), file=sys.stderr, flush=True)
                reply = {"ok": False, "status": "CRASH", "stage": "", "reason": harness_error(message.get("op"), exc)}
            sys.stdout.flush()
            sys.stderr.flush()
            reply["id"] = message.get("id")
            protocol.send(fd, reply)


def run(sock: socket.socket, device: str) -> int:
    """The body of a freshly forked contestant: get the device ready, say so, serve."""
    if device == "cuda":
        start_cuda()
        inputs_mod.warm_fingerprints(torch.device("cuda"))  # off any evaluation's clock (the fused way only)
    protocol.send(sock.fileno(), {"ok": True, "ready": True, "pid": os.getpid()})
    return Contestant(sock, device).serve()
