"""The runtime guards, for exploits the static rules already stop (defence in depth): driven
in-process through the contestant's own code with plain Python callables.

These guards are a first filter that gives an honest mistake a clear reason: they run in the
contestant's process, where a hostile candidate can switch them off. What a candidate cannot
switch off (the judge's checks, the sandbox) is tested in test_red_team.py.
"""

from __future__ import annotations

import importlib.util
import secrets
import threading
import time

import pytest
import torch

from autokernel_tui.harness.worker.contestant import Contestant
from autokernel_tui.harness.worker.errors import Verdict
from autokernel_tui.tasks.spec import load_spec

from .conftest import GOOD, PREFIX


@pytest.fixture()
def contestant(tiny_task, tmp_path):
    c = Contestant(sock=None, device="cpu")
    c.setup(tiny_task, tmp_path)
    return c


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    path = tmp_path_factory.mktemp("k") / "good.py"
    path.write_text(GOOD)
    spec = importlib.util.spec_from_file_location("_harness_test_good", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.launch


def _call(c, fn, tiny_task):
    """One guarded call of ``fn`` as the contestant makes it for the judge's smoke stage."""
    spec = load_spec(tiny_task)
    shape, dtype = spec.shapes_for("cpu")[0], spec.dtypes[0]
    recipe = {"dims": dict(shape.dims), "dtype": dtype, "base_seed": secrets.randbits(40),
              "steps": [["perturb", secrets.randbits(40)]]}
    inputs = c.builder.build(recipe)
    expected = [{"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch."), "device": "cpu"}
                for o in [c.builder.ref.reference(*inputs)]]
    c.fn = fn
    return c.call({"set": "s", "recipe": recipe, "where": f"{shape.name} {dtype}",
                   "expected": expected, "forbidden_ops": list(spec.forbidden_ops)})


def test_an_honest_callable_passes(contestant, launch, tiny_task):
    _call(contestant, lambda x, w, eps: launch(x, w, eps, torch.empty_like(x)), tiny_task)


def test_a_background_thread_is_rejected(contestant, launch, tiny_task):
    stop = threading.Event()

    def evil(x, w, eps):
        threading.Thread(target=stop.wait, args=(5,), daemon=True).start()
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(contestant, evil, tiny_task)
    finally:
        stop.set()
    assert info.value.status == "REJECTED" and "thread" in info.value.reason


# torch.sum is the L2 flush: a candidate that disarmed it would be timed with a warm cache.
@pytest.mark.parametrize("owner, name", [(time, "perf_counter"), (torch.cuda.Event, "elapsed_time"),
                                         (torch.cuda, "synchronize"), (torch, "sum")])
def test_patching_a_timer_at_run_time_is_rejected(contestant, launch, tiny_task, owner, name):
    original = getattr(owner, name)

    def evil(x, w, eps):
        setattr(owner, name, lambda *a, **k: 0.0)
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(contestant, evil, tiny_task)
    finally:
        setattr(owner, name, original)
    assert info.value.status == "REJECTED" and name in info.value.reason


def test_patching_the_harness_itself_is_rejected(contestant, launch, tiny_task):
    from autokernel_tui.harness.worker import correctness
    original = correctness.compare

    def evil(x, w, eps):
        correctness.compare = lambda *a, **k: None
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(contestant, evil, tiny_task)
    finally:
        correctness.compare = original
    assert info.value.status == "REJECTED" and "correctness.compare" in info.value.reason


def test_a_tensor_subclass_output_is_rejected(contestant, launch, tiny_task):
    class Lazy(torch.Tensor):
        pass

    with pytest.raises(Verdict) as info:
        _call(contestant, lambda x, w, eps: launch(x, w, eps, torch.empty_like(x)).as_subclass(Lazy), tiny_task)
    assert info.value.status == "REJECTED" and "subclass" in info.value.reason


def test_exiting_the_worker_is_a_crash(contestant, launch, tiny_task):
    def evil(x, w, eps):
        raise SystemExit(0)

    with pytest.raises(Verdict) as info:
        _call(contestant, evil, tiny_task)
    assert info.value.status == "CRASH"


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    """The judge's own state, in this process, with a real zygote and contestants (no sandbox)."""
    from autokernel_tui.harness.worker.pool import ContestantPool
    from autokernel_tui.harness.worker.stages import JudgeState
    root = tmp_path_factory.mktemp("judge")
    pool = ContestantPool("cpu", root, root / "cache", timeout_s=120, memory_limit_mb=8000, landlock=False,
                          read_roots=None)
    yield JudgeState("cpu", pool, "in-process test judge")
    pool.close()


def test_a_time_below_the_roofline_floor_is_rejected(judge, tiny_task):
    from autokernel_tui.harness.worker.stages import Evaluation
    try:
        judge.measured = {"bandwidth_gbps": 1e-9}  # a machine this slow makes every real time "impossible"
        report = Evaluation(judge, tiny_task, quick=True).run(GOOD)
        assert report.status == "REJECTED" and report.stage == "timing"
        assert "below the hardware floor" in report.reason
        judge.measured = {"bandwidth_gbps": 1e6}
        report = Evaluation(judge, tiny_task, quick=True).run(GOOD)
        assert report.status == "PASS", report.reason
        assert all(0 < r.roofline_pct <= 100 for r in report.shapes)
    finally:
        judge.measured = None


def test_behaving_differently_when_timed_is_rejected(harness, tiny_task):
    # Honest for the correctness stages' calls, then wrong: caught on a secret timed rep.
    src = PREFIX + '''
CALLS = [0]


def kernel_fn(x, weight, eps):
    CALLS[0] += 1
    return launch(x, weight, eps if CALLS[0] <= 12 else 1e9, torch.empty_like(x))
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing"
    assert "timed run is wrong" in report.reason


def test_torch_op_only_while_timed_is_rejected(harness, tiny_task):
    src = PREFIX + '''
CALLS = [0]


def kernel_fn(x, weight, eps):
    CALLS[0] += 1
    y = launch(x, weight, eps, torch.empty_like(x))
    return y if CALLS[0] <= 12 else y.mul(1.0)
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing" and "aten::mul" in report.reason


def test_sniffing_the_poison_to_spot_watched_calls_does_not_help(harness, tiny_task):
    # Honest only when fresh memory is NaN (the correctness stages poison it); the timed
    # reps, watched or not, hand out unpoisoned memory, so the secret checked rep sees the cheat.
    src = PREFIX + '''
import math


def kernel_fn(x, weight, eps):
    probe = torch.empty_like(x)
    watched = math.isnan(float(probe[0, 0]))
    return launch(x, weight, eps if watched else 1e9, probe)
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing"


def test_calls_timed_as_called_back_to_back(contestant, launch, tiny_task):
    spec = load_spec(tiny_task)
    shape, dtype = spec.shapes_for("cpu")[0], spec.dtypes[0]
    recipes = [{"dims": dict(shape.dims), "dtype": dtype, "base_seed": 7, "steps": [["perturb", i]]} for i in range(3)]
    contestant.fn = lambda x, w, eps: launch(x, w, eps, torch.empty_like(x))
    reply = contestant.time_as_called({"recipes": recipes, "where": "t"})
    assert reply["as_called_us"] > 0


def test_the_judge_keeps_the_inputs_of_its_latest_tasks_only(judge, tmp_path):
    """One judge serves every task of a run (KernelBench through one harness ran the H200 out of memory:
    each task's cached inputs stayed, run 11): the least recently used task's reference and inputs go."""
    from autokernel_tui.harness.worker.stages import TASKS_KEPT
    from .conftest import make_tiny_task

    kept = TASKS_KEPT["cpu"]
    tasks = []
    for i in range(kept + 3):
        task = make_tiny_task(tmp_path / f"t{i}")
        (task / "reference.py").write_text((task / "reference.py").read_text() + f"\n# task {i}\n")
        tasks.append(task)
    digests = [judge.reference(t)[1] for t in tasks]
    assert list(judge._refs) == digests[-kept:]
    judge.reference(tasks[-kept])  # used again: the most recent now
    assert list(judge._refs)[-1] == digests[-kept]
    again = judge.reference(tasks[0])  # dropped earlier: built again, and correct
    assert again[1] == digests[0] and len(judge._refs) == kept


def test_out_of_memory_is_said_even_when_torchs_own_report_of_it_fails():
    """In the sandbox torch's out-of-memory path dies on an NVML assert (H200, run 11): the reason says
    out of GPU memory, not an internal assert."""
    from autokernel_tui.harness.worker.contestant import candidate_error

    exc = RuntimeError('NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
                       '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135, please report a bug to PyTorch.')
    v = candidate_error(exc, "float32 (timing)", "timing")
    assert v.status == "FAIL" and "out of GPU memory" in v.reason and "CUDA out of memory" in v.reason
    assert "INTERNAL ASSERT" not in v.reason
    # H100, run 19: the same report failing in another NVML call (a planted-change comparison read FAIL)
    other = RuntimeError('NVML_SUCCESS == DriverAPI::get()->nvmlDeviceGetHandleByPciBusId_v2_( pci_id, '
                         '&nvml_device) INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1150')
    assert "out of GPU memory" in candidate_error(other, "large float32 (timing)", "timing").reason
    plain = candidate_error(RuntimeError("boom"), "x", "smoke")
    assert plain.reason == "x: kernel_fn raised RuntimeError: boom"


class _CardState:
    """What ``_retaken_if_out_of_memory`` reads of the judge: on a GPU, and dropping its caches."""
    cuda = True

    def __init__(self) -> None:
        self.forgotten = 0

    def forget_tasks(self) -> None:
        self.forgotten += 1


def _attempts(*outcomes):
    """An attempt that gives (or raises) the next outcome each call."""
    queue = list(outcomes)

    def attempt():
        out = queue.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out
    return attempt


def test_an_evaluation_out_of_gpu_memory_is_retaken_once_after_the_judge_drops_its_caches():
    """KernelBench on an 80 GB H100 (run 12): 4 of 6 problems ran out of memory, the judge holding an
    earlier task's 6 GB inputs beside the contestant. The judge drops every cache and tries once more."""
    import torch
    from autokernel_tui.harness.worker.judge import _retaken_if_out_of_memory

    ok = {"ok": True, "report": {"status": "PASS", "reason": ""}}
    st = _CardState()  # the judge itself ran out
    assert _retaken_if_out_of_memory(st, _attempts(torch.OutOfMemoryError("CUDA out of memory"), ok)) is ok
    assert st.forgotten == 1
    st = _CardState()  # the contestant beside it did: its verdict says so
    oom_report = {"ok": True, "report": {"status": "FAIL", "reason": "x: out of GPU memory: CUDA out of memory"}}
    assert _retaken_if_out_of_memory(st, _attempts(oom_report, ok)) is ok and st.forgotten == 1
    st = _CardState()  # a comparison's verdict
    oom_compare = {"ok": True, "status": "FAIL", "reason": "x: out of GPU memory"}
    assert _retaken_if_out_of_memory(st, _attempts(oom_compare, ok)) is ok and st.forgotten == 1
    st = _CardState()  # out of memory again: said in one line, not as a harness bug
    disguised = RuntimeError('NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
                             '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135')
    reply = _retaken_if_out_of_memory(st, _attempts(torch.OutOfMemoryError("a"), disguised))
    assert reply["ok"] is False and reply["reason"].startswith("out of GPU memory in the judge")
    assert "INTERNAL ASSERT" not in reply["reason"] and st.forgotten == 2
    st = _CardState()  # a failure for another reason is not retaken
    fail = {"ok": True, "report": {"status": "FAIL", "reason": "x: kernel_fn raised ValueError"}}
    assert _retaken_if_out_of_memory(st, _attempts(fail, ok)) is fail and st.forgotten == 0
    with pytest.raises(KeyError):
        _retaken_if_out_of_memory(st, _attempts(KeyError("bug"), ok))
    st.cuda = False  # the CPU: nothing shares a card, nothing retaken
    assert _retaken_if_out_of_memory(st, _attempts(oom_report, ok)) is oom_report


def test_the_harness_memory_budgets_leave_half_the_card_for_references_and_outputs(monkeypatch):
    from autokernel_tui.harness.worker import memory

    monkeypatch.setattr(memory, "card_bytes", lambda: 80 << 30)
    held = sum(memory.budget("cuda", w) for w in ("judge", "contestant", "batch"))
    assert 0 < held <= (80 << 30) // 2
    assert memory.budget("cpu", "batch") == memory.CPU_BYTES["batch"]



def test_dropping_the_judges_caches_also_ends_its_warm_contestants(judge, tiny_task):
    """Run 13 (H200): a warm contestant held 51 GB while the judge needed 12 GB more. The retake's
    forget_tasks ends the warm ones; the next evaluation gets a fresh contestant and still passes."""
    from autokernel_tui.harness.worker.stages import Evaluation
    assert Evaluation(judge, tiny_task, quick=True).run(GOOD).status == "PASS"
    warm = [p.pid for p in judge.pool._live]
    assert warm and all(p.alive for p in judge.pool._live)
    judge.forget_tasks()
    assert judge.pool._live == [] and not judge._refs
    report = Evaluation(judge, tiny_task, quick=True).run(GOOD)
    assert report.status == "PASS", report.reason
    assert not set(warm) & {p.pid for p in judge.pool._live}


def test_a_contestant_kept_warm_keeps_only_an_idle_share_of_its_inputs():
    import torch
    from autokernel_tui.harness.worker.inputs import InputBuilder, nbytes

    class Ref:
        @staticmethod
        def make_inputs(dims, dtype, device, seed):
            return (torch.zeros(dims["N"], dtype=dtype),)

    b = InputBuilder(Ref, "cpu", cache_bytes=1 << 20)
    for seed in range(3):
        b.base({"N": 1024}, "float32", seed)  # 4 KB each
    assert len(b._base) == 3
    b.base({"N": 1 << 20}, "float32", 9)  # 4 MB, over the cache: the evaluation's own set stays
    assert len(b._base) == 1 and nbytes(next(iter(b._base.values()))) == 4 << 20
    b.trim(64 << 10)  # idle: nothing that large is kept
    assert b._base == {}
    b.base({"N": 1024}, "float32", 0)
    b.trim(64 << 10)
    assert len(b._base) == 1


def test_a_tensor_subclass_output_of_a_timed_call_is_rejected(contestant, launch, tiny_task):
    # A lazy output would do its work when fingerprinted, after the clock stopped.
    class Lazy(torch.Tensor):
        pass

    spec = load_spec(tiny_task)
    shape, dtype = spec.shapes_for("cpu")[0], spec.dtypes[0]
    recipes = [{"dims": dict(shape.dims), "dtype": dtype, "base_seed": secrets.randbits(40), "steps": []}
               for _ in range(3)]
    msg = {"recipes": recipes, "warmup": 0, "where": f"{shape.name} {dtype}", "lead_us": 0.0, "stage": "timing",
           "forbidden_ops": list(spec.forbidden_ops)}
    contestant.fn = lambda x, w, eps: launch(x, w, eps, torch.empty_like(x))
    contestant.time(dict(msg))  # plain outputs: timed, then every rep fingerprinted
    got = contestant.fingerprint_batch({"seed": 5})["fingerprints"]
    assert len(got) == 3 and all(len(rep) == 1 for rep in got)
    contestant.fn = lambda x, w, eps: launch(x, w, eps, torch.empty_like(x)).as_subclass(Lazy)
    with pytest.raises(Verdict) as info:
        contestant.time(dict(msg))
    assert info.value.status == "REJECTED" and "not a plain torch.Tensor" in info.value.reason


def test_out_of_memory_outside_the_candidates_calls_is_retaken():
    """Run 21 (H100): a contestant building its inputs for the as-called figure ran out of memory (idle
    contestants and the judge's caches held the card); said as a plain contestant error, no experiment after
    the ninth was retaken and every one CRASHed. Said as out of memory, the judge drops its caches and
    retakes it."""
    import torch
    from autokernel_tui.harness.worker.contestant import harness_error
    from autokernel_tui.harness.worker.judge import _retaken_if_out_of_memory, _says_out_of_memory

    reason = harness_error("time_as_called", torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert reason.startswith("contestant error in time_as_called: out of GPU memory: ")
    crash = {"ok": True, "report": {"status": "CRASH", "reason": reason}}
    assert _says_out_of_memory(crash)
    st, ok = _CardState(), {"ok": True, "report": {"status": "PASS", "reason": ""}}
    assert _retaken_if_out_of_memory(st, _attempts(crash, ok)) is ok and st.forgotten == 1
    bug = harness_error("call", KeyError("x"))
    assert bug == "contestant error in call: KeyError: 'x'" and "out of GPU memory" not in bug


class _IdleProxy:
    def __init__(self, fails: bool = False) -> None:
        self.asked, self.fails, self.killed, self.deadline, self.scratch = [], fails, False, 0.0, None

    def request(self, message, stage):
        from autokernel_tui.harness.worker.errors import Verdict
        self.asked.append(message)
        if self.fails:
            raise Verdict("TIMEOUT", stage, "no answer")
        return {}, 0.0

    def kill(self) -> None:
        self.killed = True


def test_warm_contestants_outside_an_evaluation_give_memory_back_when_the_card_is_short(monkeypatch):
    from autokernel_tui.harness.worker import memory
    from autokernel_tui.harness.worker.pool import ContestantPool

    pool = object.__new__(ContestantPool)
    pool.device = "cuda"
    idle, busy, stuck = _IdleProxy(), _IdleProxy(), _IdleProxy(fails=True)
    pool._live, pool._busy = [idle, stuck, busy], [busy]
    released = []
    monkeypatch.setattr(memory, "release_cached", lambda: released.append(1))
    monkeypatch.setattr(memory, "short", lambda: False)
    pool.trim_idle()  # room on the card: every warm contestant keeps its inputs
    assert idle.asked == [] and released == []
    monkeypatch.setattr(memory, "short", lambda: True)
    pool.trim_idle()
    assert idle.asked == [{"op": "drop", "sets": True, "idle": True}] and busy.asked == []
    assert released == [1] and stuck.killed and pool._live == [idle, busy]  # one that cannot answer is retired
