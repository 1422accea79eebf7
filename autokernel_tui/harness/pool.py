"""Several harnesses at once: one per GPU of this host, a few on the CPU, or one per GPU of a Ray cluster.

The engine evaluates through whichever member is free (parent side, stdlib only; Ray only when
asked for). Each member is a whole ``Harness``: its own judge, sandbox and warm contestants, on
its own GPU, so timed measurements never share a GPU. With Ray (``run.backend = "ray"``) each
member is an actor holding a ``Harness`` on the node that has its GPU; only source text, the
task's harness-owned files and report dicts travel, and git, the workspace and the engine stay on
the head.
"""

from __future__ import annotations

import queue
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.tasks.spec import HARNESS_OWNED, KERNEL_FILE, owned_file_hashes


class HarnessPool:
    """``evaluate`` / ``compare`` / ``device_info`` / ``close`` like one Harness, over many."""

    def __init__(self, members: list[Any]) -> None:
        if not members:
            raise ValueError("a harness pool needs at least one member")
        self.members = members
        self._free: queue.Queue[Any] = queue.Queue()
        for m in members:
            self._free.put(m)
        self.busy = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.members)

    def _use(self, call: Callable[[Any], Any]) -> Any:
        member = self._free.get()
        with self._lock:
            self.busy += 1
        try:
            return call(member)
        finally:
            with self._lock:
                self.busy -= 1
            self._free.put(member)

    # The options travel as given: a member takes the same keywords as one Harness.
    def evaluate(self, task_dir: str | Path, **options: Any) -> Report:
        return self._use(lambda h: h.evaluate(task_dir, **options))

    def compare(self, task_dir: str | Path, candidate_source: str, incumbent_source: str,
                **options: Any) -> Comparison:
        return self._use(lambda h: h.compare(task_dir, candidate_source, incumbent_source, **options))

    def device_info(self) -> dict[str, Any]:
        infos = [m.device_info() for m in self.members]
        info = dict(infos[0])
        info["pool"] = [i.get("name", "?") for i in infos]
        return info

    @property
    def restarts(self) -> int:
        return sum(getattr(m, "restarts", 0) for m in self.members)

    def close(self) -> None:
        for m in self.members:
            try:
                m.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                pass

    def __enter__(self) -> "HarnessPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_pool(gpus: list[int] | None, cpu_workers: int = 2, **harness_kwargs: Any) -> HarnessPool:
    """One Harness per GPU index in ``gpus``; without GPUs, ``cpu_workers`` interpreter harnesses."""
    from autokernel_tui.harness.runner import Harness

    device = harness_kwargs.pop("device", "cpu")
    if gpus:
        return HarnessPool([Harness(device="cuda", gpu=g, **harness_kwargs) for g in gpus])
    return HarnessPool([Harness(device=device, **harness_kwargs) for _ in range(max(1, cpu_workers))])


def visible_gpus() -> list[int]:
    """GPU indices of this host (from nvidia-smi; no torch in the engine's process), or those
    CUDA_VISIBLE_DEVICES names when it is set."""
    import os
    import shutil
    import subprocess

    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:  # "" hides every GPU
        return [int(x) for x in named.split(",") if x.strip().isdigit()]

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(x) for x in out.split() if x.strip().isdigit()]


def parse_gpus(setting: str) -> list[int] | None:
    """``run.gpus``: "all" (every GPU of the host, none on a CPU box) or "0,2,3"."""
    setting = (setting or "all").strip()
    if setting == "all":
        return visible_gpus() or None
    try:
        gpus = [int(x) for x in setting.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"run.gpus is 'all' or GPU indices like 0,2,3, not {setting!r}") from None
    return gpus or None


# Ray -------------------------------------------------------------------------------------------
def _task_files(task_dir: Path) -> dict[str, str]:
    return {name: (task_dir / name).read_text(encoding="utf-8") for name in HARNESS_OWNED}


class _RemoteHarness:
    """The head's handle on one Ray actor: the Harness interface, with files sent as text."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def evaluate(self, task_dir: str | Path, kernel_source: str | None = None, quick: bool = False,
                 owned_hashes: dict[str, str] | None = None) -> Report:
        import ray

        task_dir = Path(task_dir).resolve()
        if owned_hashes is not None and owned_file_hashes(task_dir) != owned_hashes:
            changed = sorted(k for k, v in owned_file_hashes(task_dir).items() if owned_hashes.get(k) != v)
            return Report(status="REJECTED", stage="static", task=task_dir.name,
                          reason=f"harness-owned file changed since the run started: {', '.join(changed)}")
        source = kernel_source if kernel_source is not None else (task_dir / KERNEL_FILE).read_text("utf-8")
        data = ray.get(self.actor.evaluate.remote(task_dir.name, _task_files(task_dir), source, quick))
        return Report.from_dict(data)

    def compare(self, task_dir: str | Path, candidate_source: str, incumbent_source: str, quick: bool = False,
                confirm: bool | None = None) -> Comparison:
        import ray

        task_dir = Path(task_dir).resolve()
        data = ray.get(self.actor.compare.remote(task_dir.name, _task_files(task_dir), candidate_source,
                                                 incumbent_source, quick, confirm))
        return Comparison.from_dict(data)

    def device_info(self) -> dict[str, Any]:
        import ray

        return ray.get(self.actor.device_info.remote())

    def close(self) -> None:
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=30)
        finally:
            ray.kill(self.actor)


class HarnessActor:
    """Runs on a Ray worker: a Harness of its own, the task files written to its own folder."""

    def __init__(self, harness_kwargs: dict[str, Any], factory: str | None = None) -> None:
        if factory:  # "module:attr" building a stand-in harness (the engine tests' fake, on a Ray worker)
            import importlib

            module, _, attr = factory.partition(":")
            self.harness = getattr(importlib.import_module(module), attr)(**harness_kwargs)
        else:
            from autokernel_tui.harness.runner import Harness

            self.harness = Harness(**harness_kwargs)
        self.root = Path(tempfile.mkdtemp(prefix="autokernel-ray-tasks-"))

    def _task(self, name: str, files: dict[str, str]) -> Path:
        import hashlib
        import json

        key = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
        task = self.root / f"{key}" / name  # the folder's name is the task's
        if not task.exists():
            task.mkdir(parents=True)
            for fname, text in files.items():
                if fname in HARNESS_OWNED:
                    (task / fname).write_text(text, encoding="utf-8")
            (task / KERNEL_FILE).write_text("# placeholder: sources travel in the requests\n", encoding="utf-8")
        return task

    def evaluate(self, name: str, files: dict[str, str], source: str, quick: bool) -> dict[str, Any]:
        return self.harness.evaluate(self._task(name, files), kernel_source=source, quick=quick).to_dict()

    def compare(self, name: str, files: dict[str, str], candidate: str, incumbent: str, quick: bool,
                confirm: bool | None) -> dict[str, Any]:
        return self.harness.compare(self._task(name, files), candidate, incumbent, quick=quick,
                                    confirm=confirm).to_dict()

    def device_info(self) -> dict[str, Any]:
        return self.harness.device_info()

    def close(self) -> None:
        import shutil

        self.harness.close()
        shutil.rmtree(self.root, ignore_errors=True)


def ray_pool(address: str | None, members: int | None = None, gpus_per_member: float = 1.0,
             cpu_members: int = 1, factory: str | None = None, **harness_kwargs: Any) -> HarnessPool:
    """One HarnessActor per GPU of an existing Ray cluster (``ray.init(address=...)``), or ``members``
    of them; on a cluster without GPUs, ``members`` (else ``cpu_members``) CPU actors (the interpreter)."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("run.backend = ray needs Ray: pip install 'autokernel-tui[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    gpus_in_cluster = int(ray.cluster_resources().get("GPU", 0))
    if members is None:
        members = max(1, int(gpus_in_cluster / gpus_per_member)) if gpus_in_cluster else max(1, cpu_members)
    num_gpus = gpus_per_member if gpus_in_cluster else 0
    if not gpus_in_cluster:
        harness_kwargs.setdefault("device", "cpu")
    actor_cls = ray.remote(num_gpus=num_gpus, num_cpus=1)(HarnessActor)
    return HarnessPool([_RemoteHarness(actor_cls.remote(harness_kwargs, factory)) for _ in range(members)])
