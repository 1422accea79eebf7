"""A generated task's starter kernel.py, made in a fresh Python process (standard library only).

``profiling/inductor_starter`` compiles the task's reference with torch.compile and patches Inductor's
config while it does; on a machine without a GPU it needs the Triton interpreter flag set before
Triton defines any kernel. A process of its own keeps all of that (and torch itself) out of the
caller, ``init``, and makes each task's capture independent of the one before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TASK_TIMEOUT_S = 900.0
DISABLE_ENV = "AUTOKERNEL_INDUCTOR_STARTERS"  # "0": generated tasks get no starter (a faster init)
JOBS_ENV = "AUTOKERNEL_STARTER_JOBS"  # starters made at once (default: one per core, at most MAX_JOBS)
MAX_JOBS = 4  # each is a torch process with Inductor's compile workers: more crowd the host (and the GPU)
TIMEOUT_ENV = "AUTOKERNEL_STARTER_TIMEOUT_S"  # seconds per task's starter (default TASK_TIMEOUT_S)
# "0": the starter is not run against the reference where it is made (the CPU interpreter at a
# benchmark's full shapes takes hours; the harness checks it before anything is timed either way).
VERIFY_ENV = "AUTOKERNEL_STARTER_VERIFY"

_BOOT = """
import os, sys
import torch
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
from autokernel_tui.profiling.inductor_starter import _task_main
sys.exit(_task_main(sys.argv[1]))
"""


@dataclass
class StarterResult:
    """What a starter attempt gave (here and in ``inductor_starter``, which makes it in the child)."""

    source: str | None                      # kernel.py text, None when no starter could be made
    knobs: dict[str, list[int]] = field(default_factory=dict)   # task.toml [knobs]
    reason: str | None = None               # why there is no starter
    verified: bool = False                  # kernel_fn was run where it was made and matched the reference
    inductor_code: list[str] = field(default_factory=list)      # the captured modules, for debugging
    origin: str = "profiling/inductor_starter"  # what wrote it: Inductor's code, or profiling/gemm_template

    @property
    def ok(self) -> bool:
        return self.source is not None


def for_task(task_dir: Path, timeout_s: float | None = None) -> StarterResult:
    """The starter of the generated task in ``task_dir`` (its reference at its recorded shape).
    Never raises: a failure is the result's reason."""
    if os.environ.get(DISABLE_ENV) == "0":
        return StarterResult(None, reason=f"starters turned off ({DISABLE_ENV}=0)")
    if timeout_s is None:
        try:
            timeout_s = float(os.environ.get(TIMEOUT_ENV) or TASK_TIMEOUT_S)
        except ValueError:
            timeout_s = TASK_TIMEOUT_S
    try:
        out = _run([sys.executable, "-c", _BOOT, str(task_dir)], timeout_s)
    except subprocess.TimeoutExpired:
        return StarterResult(None, reason=f"making the starter took over {timeout_s:.0f} s")
    except OSError as e:
        return StarterResult(None, reason=f"could not start Python for the starter: {e}")
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no error output"])[-1]
        return StarterResult(None, reason=f"the starter process failed: {tail[:300]}")
    try:
        data = json.loads(out.stdout)
    except ValueError:
        return StarterResult(None, reason="the starter process printed no result")
    return StarterResult(data.get("source"), {k: list(v) for k, v in (data.get("knobs") or {}).items()},
                         data.get("reason"), bool(data.get("verified")),
                         origin=data.get("origin") or StarterResult.origin)


_children: set[subprocess.Popen] = set()  # the starter processes running now (``_stop_children``)
_children_lock = threading.Lock()
_stopping = threading.Event()  # set by ``_stop_children``: a process started after it is killed at once
_child_env: dict[str, str] = {}  # set by ``make_all`` for the processes it starts
COMPILE_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"  # Inductor's compile workers per process


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)``, the process known to
    ``_stop_children`` while it runs."""
    env = {**os.environ, **_child_env} if _child_env else None
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        with _children_lock:
            _children.add(proc)
            if _stopping.is_set():  # its job was taken just before a Ctrl-C
                proc.kill()
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException:  # a timeout or a Ctrl-C here: the child goes too, as with subprocess.run
            proc.kill()
            proc.communicate()
            raise
        finally:
            with _children_lock:
                _children.discard(proc)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _stop_children() -> None:
    with _children_lock:
        _stopping.set()
        running = list(_children)
    for proc in running:
        try:
            proc.kill()
        except OSError:  # already gone
            pass


def jobs_at_once() -> int:
    """How many starters ``make_all`` makes at once: ``AUTOKERNEL_STARTER_JOBS``, else one per core up
    to MAX_JOBS."""
    try:
        n = int(os.environ.get(JOBS_ENV) or 0)
    except ValueError:
        n = 0
    return n if n > 0 else max(1, min(MAX_JOBS, os.cpu_count() or 1))


def make_all(jobs: list[tuple[Path, Callable[[], None]]], progress: Callable[..., None] | None = None,
             at_once: int | None = None) -> list[tuple[Path, Exception]]:
    """Run each task's starter job (``(task folder, job)``: the job makes the starter, a process of its own,
    and writes it), up to ``at_once`` together: a profile's 20 generated tasks are 20 compiles, and
    init waited for each in turn. Returns the jobs that raised, with their exception; ``progress``
    (``progress.ProgressFn``) hears each one that ends."""
    if not jobs:
        return []
    _stopping.clear()
    at_once = max(1, min(len(jobs), at_once or jobs_at_once()))
    stage = f"making {len(jobs)} starter kernel.py files (Inductor's Triton, {at_once} at once)"
    if progress is not None:
        progress(stage, 0, len(jobs))
    # Each process's Inductor would start a compile worker per core: the cores shared out instead (unless
    # the user chose a number).
    _child_env.clear()
    if at_once > 1 and COMPILE_THREADS_ENV not in os.environ:
        _child_env[COMPILE_THREADS_ENV] = str(max(1, (os.cpu_count() or 1) // at_once))
    try:
        return _make_all(jobs, progress, at_once, stage)
    finally:
        _child_env.clear()


def _make_all(jobs: list[tuple[Path, Callable[[], None]]], progress: Callable[..., None] | None, at_once: int,
              stage: str) -> list[tuple[Path, Exception]]:
    failed: list[tuple[Path, Exception]] = []
    with ThreadPoolExecutor(at_once, thread_name_prefix="starter") as pool:  # each thread waits on a process
        futures = {pool.submit(job): dest for dest, job in jobs}
        try:
            for done, future in enumerate(as_completed(futures), 1):
                try:
                    future.result()
                except Exception as exc:  # noqa: BLE001 - one task's failure is that task's, reported by the caller
                    failed.append((futures[future], exc))
                if progress is not None:
                    progress(stage, done, len(jobs))
        except BaseException:  # Ctrl-C: no new starter, the running ones killed (else init waits minutes)
            pool.shutdown(wait=False, cancel_futures=True)
            _stop_children()
            raise
    order = {dest: k for k, (dest, _) in enumerate(jobs)}
    return sorted(failed, key=lambda f: order[f[0]])
