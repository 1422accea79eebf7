"""The offline tuner: a real search over kernel.py's knobs that never repeats and resumes."""

import itertools
import random
import statistics

import pytest

from autokernel_tui.agents.base import AgentContext, NothingToPropose
from autokernel_tui.agents.knobs import parse_knobs
from autokernel_tui.agents.tuner import TunerAgent
from tests.agents.conftest import make_task

KERNEL = """import triton

# knobs
BLOCK_M = {a}  # rows per program
BLOCK_N = {b}
NUM_WARPS = {c}
NUM_STAGES = {d}


def kernel_fn(x):
    return x
"""
KNOBS = """BLOCK_M = [1, 2, 4, 8, 16, 32]
BLOCK_N = [64, 128, 256, 512, 1024, 2048]
NUM_WARPS = [1, 2, 4, 8, 16]
NUM_STAGES = [1, 2, 3, 4]"""
SPACE = [(1, 2, 4, 8, 16, 32), (64, 128, 256, 512, 1024, 2048), (1, 2, 4, 8, 16), (1, 2, 3, 4)]
START = (4, 256, 4, 2)


def _config(source):
    k = parse_knobs(source)
    return (k["BLOCK_M"].value, k["BLOCK_N"].value, k["NUM_WARPS"].value, k["NUM_STAGES"].value)


def _objective(seed):
    """A smooth, interacting landscape with a random optimum, plus a failure region."""
    r = random.Random(f"objective-{seed}")  # independent of the searchers' own seeds
    opt = [r.randrange(len(v)) for v in SPACE]
    w = [r.uniform(0.02, 0.12) for _ in SPACE]

    noise = random.Random(f"noise-{seed}")

    def f(config):
        idx = [SPACE[i].index(v) for i, v in enumerate(config)]
        if idx[0] + idx[1] >= 10:  # "out of shared memory": the harness fails it
            return None
        d = [i - o for i, o in zip(idx, opt)]
        true = 1.0 + 0.5 * (1 - sum(wi * di * di for wi, di in zip(w, d)) - 0.02 * abs(d[0] - d[1]))
        return true * (1 + noise.gauss(0, 0.01))  # timing noise: a measurement, not the truth
    return f


def _simulate(task, propose, f, n):
    """The engine loop in miniature: keep a candidate when it is faster; history rows like results.tsv."""
    inc = KERNEL.format(a=START[0], b=START[1], c=START[2], d=START[3])
    best = f(START)
    history, seen = [], [START]
    for i in range(n):
        report = {"summary": {"speedup_vs_baseline": best}}
        ctx = AgentContext(task=task, incumbent_source=inc, incumbent_report=report, history=list(history),
                           experiment=i + 1)
        try:
            p = propose(ctx)
        except NothingToPropose:
            break
        cfg = _config(p.source)
        seen.append(cfg)
        score = f(cfg)
        status = "fail" if score is None else ("keep" if score > best else "discard")
        history.append({"experiment": i + 1, "status": status, "description": p.description,
                        "speedup_vs_baseline": "" if score is None else f"{score:.4f}",
                        "speedup_vs_incumbent": "" if score is None else f"{score / best:.4f}",
                        "source": p.source, "reason": "out of resources" if score is None else ""})
        if status == "keep":
            inc, best = p.source, score
    return best, seen, history


class RandomSearch:
    """The baseline to beat: uniform random untried configurations."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def __call__(self, ctx):
        from autokernel_tui.agents.base import Proposal
        from autokernel_tui.agents.knobs import rewrite
        tried = {_config(r["source"]) for r in ctx.history} | {_config(ctx.incumbent_source)}
        while True:
            cfg = tuple(self.rng.choice(v) for v in SPACE)
            if cfg not in tried:
                names = ("BLOCK_M", "BLOCK_N", "NUM_WARPS", "NUM_STAGES")
                return Proposal(rewrite(ctx.incumbent_source, dict(zip(names, cfg))), "random", "random")


@pytest.fixture
def synth(tmp_path):
    return make_task(tmp_path, KERNEL.format(a=START[0], b=START[1], c=START[2], d=START[3]), KNOBS)


def test_beats_random_search_on_average(synth):
    tuner_best, random_best = [], []
    for seed in range(12):
        f = _objective(seed)
        tuner = TunerAgent(seed=seed, budget=15)
        tuner_best.append(_simulate(synth, lambda c: tuner.propose(c, lambda e: None), f, 15)[0])
        random_best.append(_simulate(synth, RandomSearch(seed), _objective(seed), 15)[0])
    assert statistics.mean(tuner_best) > statistics.mean(random_best) + 0.02, (tuner_best, random_best)
    assert sum(t >= r for t, r in zip(tuner_best, random_best)) >= 9


def test_never_repeats_and_says_when_the_space_is_exhausted(tmp_path):
    task = make_task(tmp_path, KERNEL.format(a=4, b=256, c=4, d=2),
                     "BLOCK_M = [2, 4, 8]\nBLOCK_N = [128, 256]\nNUM_WARPS = [4, 8]\nNUM_STAGES = [2, 3]")
    f = _objective(3)
    tuner = TunerAgent(seed=0)
    _, seen, history = _simulate(task, lambda c: tuner.propose(c, lambda e: None), f, 100)
    assert len(seen) == len(set(seen)) == 3 * 2 * 2 * 2  # every configuration, each exactly once
    ctx = AgentContext(task=task, incumbent_source=history[0]["source"], history=history)
    with pytest.raises(NothingToPropose, match="all 24 knob configurations have been tried"):
        tuner.propose(ctx, lambda e: None)


def test_resumes_from_history_with_a_fresh_instance(synth):
    f = _objective(5)
    first = TunerAgent(seed=7, budget=30)
    _, seen, history = _simulate(synth, lambda c: first.propose(c, lambda e: None), f, 12)
    inc = next(r["source"] for r in reversed(history) if r["status"] == "keep") if any(
        r["status"] == "keep" for r in history) else synth.kernel_path.read_text()
    ctx = AgentContext(task=synth, incumbent_source=inc, history=history,
                       incumbent_report={"summary": {"speedup_vs_baseline": f(_config(inc))}})
    a = TunerAgent(seed=7, budget=30).propose(ctx, lambda e: None)
    b = TunerAgent(seed=7, budget=30).propose(ctx, lambda e: None)  # "after a restart": same state, same move
    assert a.source == b.source and _config(a.source) not in set(seen)


def test_history_from_a_different_kernel_body_does_not_count_as_tried(synth):
    src = synth.kernel_path.read_text()
    tuner = TunerAgent(seed=0)
    first = tuner.propose(AgentContext(task=synth, incumbent_source=src), lambda e: None)
    rewritten_body = first.source.replace("return x", "return x.clone()")
    ctx = AgentContext(task=synth, incumbent_source=src,
                       history=[{"status": "discard", "speedup_vs_baseline": "0.5", "source": rewritten_body}])
    assert tuner.propose(ctx, lambda e: None).source == first.source


def test_proposals_edit_only_constant_lines_and_explain_each_move(rmsnorm_ctx):
    events = []
    p = TunerAgent(seed=1).propose(rmsnorm_ctx, events.append)
    before, after = rmsnorm_ctx.incumbent_source.splitlines(True), p.source.splitlines(True)
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(changed) == 1
    name, arrow = p.description.split(" ", 1)
    old, new = arrow.split(" -> ")
    assert changed[0][0].startswith(f"{name} = {old}") and changed[0][1].startswith(f"{name} = {new}")
    assert changed[0][0].split("=", 1)[1].replace(old, new, 1) == changed[0][1].split("=", 1)[1]
    assert p.hypothesis and p.agent == "tuner"
    assert [e.kind for e in events] == ["progress", "text"] and name in events[1].text


def test_keeps_going_in_a_direction_that_paid_off(synth):
    src = synth.kernel_path.read_text()  # NUM_WARPS = 4 here
    came_from = src.replace("NUM_WARPS = 4", "NUM_WARPS = 8")
    ctx = AgentContext(task=synth, incumbent_source=src, incumbent_report={"summary": {"speedup_vs_baseline": 1.2}},
                       history=[{"status": "discard", "speedup_vs_baseline": "1.0", "source": came_from}])
    p = TunerAgent(seed=0).propose(ctx, lambda e: None)
    assert p.description == "NUM_WARPS 4 -> 2"


def test_a_kernel_without_knobs_is_done(tmp_path):
    task = make_task(tmp_path, "import triton\n\ndef kernel_fn(x):\n    return x\n")
    with pytest.raises(NothingToPropose, match="no tunable knobs"):
        TunerAgent().propose(AgentContext(task=task, incumbent_source=task.kernel_path.read_text()), lambda e: None)


def test_frozen_knobs_are_never_moved(synth):
    src = synth.kernel_path.read_text()
    tuner = TunerAgent(seed=0, frozen=("BLOCK_M", "BLOCK_N", "NUM_STAGES"))
    history = []
    for _ in range(4):  # NUM_WARPS has 5 values: 4 moves, then nothing left
        p = tuner.propose(AgentContext(task=synth, incumbent_source=src, history=list(history)), lambda e: None)
        assert p.description.startswith("NUM_WARPS ")
        history.append({"status": "discard", "speedup_vs_baseline": "0.5", "source": p.source,
                        "description": p.description})
    with pytest.raises(NothingToPropose):
        tuner.propose(AgentContext(task=synth, incumbent_source=src, history=history), lambda e: None)


def _first_moves(task, report, n=4, seed=0):
    """The tuner's first n proposals on a starter, each discarded as slower (what noise does to a move
    the Triton interpreter cannot see)."""
    src = task.kernel_path.read_text()
    history, moves = [], []
    for i in range(n):
        ctx = AgentContext(task=task, incumbent_source=src, incumbent_report=report, history=list(history),
                           experiment=i + 1)
        p = TunerAgent(seed=seed).propose(ctx, lambda e: None)
        moves.append(p.description)
        history.append({"experiment": i + 1, "status": "discard", "speedup_vs_baseline": "0.0030",
                        "speedup_vs_incumbent": "0.95", "source": p.source, "description": p.description})
    return moves


CPU_REPORT = {"timing_meaningful": False, "summary": {"speedup_vs_baseline": 0.0033}}
GPU_REPORT = {"timing_meaningful": True, "summary": {"speedup_vs_baseline": 0.93}}


@pytest.mark.parametrize("starter", ["rmsnorm", "softmax"])
def test_on_the_cpu_interpreter_code_path_thresholds_come_first(starter):
    """Issue 25: the demo's first four rmsnorm moves (ROWS_INT32, NUM_WARPS twice, RESIDENT_MAX_KB up)
    could not change the interpreter's time; the threshold moves that did came fifth. Under the
    interpreter the unexplored thresholds are tried first; on a GPU the order is as it was."""
    from autokernel_tui.tasks.spec import load_spec, starters_dir

    task = load_spec(starters_dir() / starter)
    moves = _first_moves(task, CPU_REPORT)
    assert all(m.split()[0] in ("MAX_FUSED_N", "RESIDENT_MAX_KB") for m in moves), moves
    assert any(m in ("RESIDENT_MAX_KB 32 -> 0", "MAX_FUSED_N 16384 -> 32768") for m in moves[:3]), moves
    gpu = _first_moves(task, GPU_REPORT, n=1)
    assert gpu == _first_moves(task, None, n=1)  # no report or a GPU one: the prior does not apply
    if starter == "rmsnorm":
        assert gpu == ["ROWS_INT32 1 -> 0"]  # as in the demo before (its report said CPU; nothing used that)
