"""The offline tuner: a budget-aware local search over kernel.py's knobs, no API needed.

Stateless by design: every call rebuilds what was tried (and how it did) from
``ctx.history``, whose rows carry each experiment's kernel.py, so a restarted
run resumes where it stopped and a configuration is never measured twice.

The search is a pattern search around the incumbent (the configuration the run
currently keeps):

1. single-knob steps to the neighbouring value, most promising first:
   continue in a direction that just paid off, then knobs not yet explored,
   then knobs in order of the effect they have shown;
2. when every single step is tried (a local optimum): double steps, then
   two-knob moves, since knobs interact (block size x warps);
3. then random restarts to untried configurations, unless the remaining budget
   is too small for a restart to pay off, in which case it keeps exploiting;
4. when nothing untried is left it raises NothingToPropose.

Only configurations measured with the same surrounding code count as tried: if
another agent rewrote the kernel, the old measurements no longer apply.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass

from autokernel_tui.agents.base import AgentContext, AgentEvent, Emit, NothingToPropose, Proposal
from autokernel_tui.agents.knobs import parse_knobs, rewrite, search_space

MEASURED = ("keep", "discard", "vetoed", "reverted")  # statuses whose speedup is a real measurement
RESTART_MIN_BUDGET = 4  # a restart needs a few experiments after it to refine what it finds
ENUMERATE_LIMIT = 200_000  # spaces up to this size are enumerated exactly for restarts

Config = tuple[int, ...]
MOVE = re.compile(r"\b([A-Z][A-Z0-9_]*) (-?\d+) -> (-?\d+)\b")  # one knob change in a tuner description
# Under the Triton interpreter (the CPU: the report says its timings are not meaningful) a kernel's time
# is the Python-level work of every program it runs: which code path a shape takes (a threshold knob)
# and how the work is cut into programs (a block size) change it; warps, stages and flags mostly
# inform the GPU compiler. Among knobs not explored yet, those are tried first there (a tie-break:
# nothing is left out). Measured on the demo's starters: the threshold moves RESIDENT_MAX_KB 32 -> 0
# (rmsnorm, 4.8x on its 37x1000 test shape) and MAX_FUSED_N 16384 -> 32768 (softmax, ~9x on its
# 20011-wide ones) were the clear wins; ROWS_INT32 and NUM_WARPS moves were noise.
INTERPRETER_FIRST = ((re.compile(r"(^|_)(MAX|MIN)(_|$)"), 0.5), (re.compile(r"BLOCK|ELEMS|CHUNK|TILE"), 0.25))


def _float(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def skeleton(source: str) -> str:
    """The source with every knob literal blanked: two configurations compare only if these match."""
    knobs = parse_knobs(source)
    lines = source.splitlines(keepends=True)
    for k in knobs.values():
        lines[k.line - 1] = lines[k.line - 1][: k.col] + "#" + lines[k.line - 1][k.end_col:]
    return "".join(lines)


@dataclass
class Move:
    changes: dict[str, tuple[int, int]]  # knob -> (old, new)
    reason: str

    def config(self, names: list[str], center: Config) -> Config:
        return tuple(self.changes[n][1] if n in self.changes else v for n, v in zip(names, center))


class TunerAgent:
    name = "tuner"

    def __init__(self, seed: int = 0, budget: int = 0, frozen: tuple[str, ...] = ()) -> None:
        self.seed = seed
        self.budget = budget  # experiments planned for each kernel; 0 = open-ended
        self.frozen = set(frozen)  # knobs to leave alone (e.g. fp32-only knobs when only fp16 is timed)

    def close(self) -> None:
        pass

    # -- what was tried -------------------------------------------------------------------------------------------
    def _tried(self, ctx: AgentContext, names: list[str]) -> tuple[dict[Config, float | None], int]:
        """Config -> best measured speedup vs baseline (None = failed), and how many rows apply."""
        base = skeleton(ctx.incumbent_source)
        tried: dict[Config, float | None] = {}
        parents: list[tuple[Config, float | None] | None] = []
        rows = 0
        for row in ctx.history:
            source = row.get("source")
            if not isinstance(source, str) or skeleton(source) != base:
                continue
            knobs = parse_knobs(source)
            config = tuple(knobs[n].value for n in names)
            rows += 1
            score = _float(row.get("speedup_vs_baseline")) if row.get("status") in MEASURED else None
            old = tried.get(config)
            tried[config] = score if old is None else (old if score is None else max(old, score))
            parents.append(self._parent(row, names, config))
        # The incumbent each move started from was measured too, though it has no row of its own.
        for parent, score in filter(None, parents):
            if tried.get(parent) is None:
                tried[parent] = score
        return tried, rows

    @staticmethod
    def _parent(row: dict, names: list[str], config: Config) -> tuple[Config, float | None] | None:
        """The configuration a tuner move ("NUM_WARPS 8 -> 4, ...") started from, and its speedup
        (speedup vs baseline / speedup vs incumbent = the incumbent's own speedup vs baseline)."""
        moves = MOVE.findall(str(row.get("description") or ""))
        if not moves or any(n not in names or config[names.index(n)] != int(new) for n, _, new in moves):
            return None
        old = dict((n, int(v)) for n, v, _ in moves)
        parent = tuple(old.get(n, v) for n, v in zip(names, config))
        svb, svi = _float(row.get("speedup_vs_baseline")), _float(row.get("speedup_vs_incumbent"))
        return parent, (svb / svi if svb is not None and svi else None)

    # -- candidate moves ------------------------------------------------------------------------------------------
    @staticmethod
    def _interpreter_prior(name: str, values: list[int]) -> tuple[float, str]:
        """How early an unexplored knob is tried when the timings come from the Triton interpreter."""
        if len(values) < 3:  # a 0/1 flag is not a threshold
            return 0.0, ""
        for pattern, weight in INTERPRETER_FIRST:
            if pattern.search(name):
                kind = "a code-path threshold" if weight == INTERPRETER_FIRST[0][1] else "a block size"
                return weight, f"; on the CPU interpreter {kind} changes the work each program does"
        return 0.0, ""

    def _single_steps(self, names, space, center, tried, center_score, step, rng,
                      interpreter: bool = False) -> list[tuple[float, Move]]:
        sensitivity = self._sensitivity(names, center, tried)
        top = max(sensitivity.values(), default=0.0) or 1.0
        scored = []
        for i, name in enumerate(names):
            values = space[name]
            idx = values.index(center[i])
            for d in (-1, 1):
                j = idx + d * step
                if not 0 <= j < len(values):
                    continue
                cand = center[:i] + (values[j],) + center[i + 1:]
                if cand in tried:
                    continue
                prio, why = 0.0, ""
                back = idx - d
                if 0 <= back < len(values):
                    behind = tried.get(center[:i] + (values[back],) + center[i + 1:], "untried")
                    if behind != "untried" and center_score is not None and (behind is None or behind < center_score):
                        prio += 3
                        was = "failed" if behind is None else f"was slower ({behind:.3f}x vs {center_score:.3f}x)"
                        why = f"continuing {'up' if d > 0 else 'down'}: {name}={values[back]} {was}"
                if name not in sensitivity:
                    prio += 2
                    bonus, because = self._interpreter_prior(name, values) if interpreter else (0.0, "")
                    prio += bonus
                    why = why or f"{name} not explored yet around this configuration{because}"
                else:
                    prio += sensitivity[name] / top
                    effect = f"has moved the speed by up to {sensitivity[name]:.3f}x" if sensitivity[name] else "was tried"
                    why = why or f"{name} {effect} on one side; trying {values[j]}"
                prio += rng.random() * 1e-3  # seeded tie-break
                scored.append((prio, Move({name: (center[i], values[j])}, why)))
        scored.sort(key=lambda t: -t[0])
        return scored

    @staticmethod
    def _sensitivity(names, center, tried) -> dict[str, float]:
        """Per knob, the largest speed difference seen between configs that differ only in it (around center)."""
        out: dict[str, float] = {}
        center_score = tried.get(center)
        for config, score in tried.items():
            diff = [i for i, (a, b) in enumerate(zip(config, center)) if a != b]
            if len(diff) == 1 and score is not None and center_score is not None:
                name = names[diff[0]]
                out[name] = max(out.get(name, 0.0), abs(score - center_score))
            elif len(diff) == 1:
                out.setdefault(names[diff[0]], 0.0)
        return out

    def _pair_moves(self, names, space, center, tried, rng) -> list[Move]:
        moves = []
        for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
            for da, db in itertools.product((-1, 1), repeat=2):
                ia, ib = space[a].index(center[i]) + da, space[b].index(center[j]) + db
                if 0 <= ia < len(space[a]) and 0 <= ib < len(space[b]):
                    m = Move({a: (center[i], space[a][ia]), b: (center[j], space[b][ib])},
                             "every single step from the incumbent is tried (a local optimum): "
                             f"trying {a} and {b} together, since knobs interact")
                    if m.config(names, center) not in tried:
                        moves.append(m)
        rng.shuffle(moves)
        return moves

    def _restart(self, names, space, center, tried, rng) -> Move | None:
        size = math.prod(len(space[n]) for n in names)
        untried_left = size - len(tried)
        if untried_left <= 0:
            return None
        config: Config | None = None
        if size <= ENUMERATE_LIMIT:
            pick = rng.randrange(untried_left)
            for c in itertools.product(*(space[n] for n in names)):
                if c not in tried:
                    if pick == 0:
                        config = c
                        break
                    pick -= 1
        else:
            for _ in range(10_000):
                c = tuple(rng.choice(space[n]) for n in names)
                if c not in tried:
                    config = c
                    break
        if config is None:
            return None
        changes = {n: (old, new) for n, old, new in zip(names, center, config) if old != new}
        return Move(changes, f"local search around the incumbent is exhausted: random restart "
                             f"({untried_left} of {size} configurations untried)")

    # -- the protocol ---------------------------------------------------------------------------------------------
    def propose(self, ctx: AgentContext, emit: Emit) -> Proposal:
        space = {k: v for k, v in search_space(ctx.incumbent_source, ctx.task.knob_space).items()
                 if k not in self.frozen}
        if not space:
            raise NothingToPropose(f"{ctx.task.name}: kernel.py declares no tunable knobs "
                                   "(module-level UPPER_CASE int constants with a search space)")
        names = list(space)
        knobs = parse_knobs(ctx.incumbent_source)
        center: Config = tuple(knobs[n].value for n in names)
        tried, rows = self._tried(ctx, names)
        report_score = _float(((ctx.incumbent_report or {}).get("summary") or {}).get("speedup_vs_baseline"))
        center_score = report_score if report_score is not None else tried.get(center)
        tried[center] = center_score
        size = math.prod(len(space[n]) for n in names)
        remaining = self.budget - rows if self.budget > 0 else None
        # Seeded by the run's seed and the state, so a resumed run makes the same choice.
        rng = random.Random(f"{self.seed}:{ctx.task.name}:{center}:{len(tried)}")
        where = ", ".join(f"{n}={v}" for n, v in zip(names, center))
        emit(AgentEvent("progress", f"tuner: {len(tried)} of {size} configurations tried; incumbent {where}"
                        + (f" ({center_score:.3f}x vs baseline)" if center_score is not None else "")
                        + (f"; {max(remaining, 0)} experiments left in the budget" if remaining is not None else "")))

        move: Move | None = None
        interpreter = (ctx.incumbent_report or {}).get("timing_meaningful") is False
        for step in (1, 2):
            ranked = self._single_steps(names, space, center, tried, center_score, step, rng, interpreter)
            if ranked:
                move = ranked[0][1]
                if step == 2:
                    move.reason = "every neighbouring value is tried: skipping one value to step over a local dip"
                break
        if move is None:
            pairs = self._pair_moves(names, space, center, tried, rng)
            # A restart needs budget left to refine what it finds; with little left, keep exploiting.
            explore = remaining is None or remaining >= RESTART_MIN_BUDGET
            if pairs and (not explore or rng.random() < 0.5):
                move = pairs[0]
            else:
                move = self._restart(names, space, center, tried, rng) or (pairs[0] if pairs else None)
        if move is None:
            raise NothingToPropose(f"{ctx.task.name}: all {size} knob configurations have been tried")

        description = ", ".join(f"{n} {old} -> {new}" for n, (old, new) in move.changes.items())
        emit(AgentEvent("text", f"{description}: {move.reason}\n"))
        return Proposal(source=rewrite(ctx.incumbent_source, {n: new for n, (_, new) in move.changes.items()}),
                        description=description, hypothesis=hypothesis(move, ctx.task.bound), agent=self.name)


def hypothesis(move: Move, bound: str) -> str:
    parts = []
    for name, (old, new) in move.changes.items():
        up, upper = new > old, name.upper()
        if "WARPS" in upper:
            parts.append(f"{'more' if up else 'fewer'} warps per program "
                         + ("keep more memory requests in flight per program" if up
                            else "cut reduction and scheduling overhead and let more programs share an SM"))
        elif "STAGES" in upper:
            parts.append("a deeper software pipeline hides more load latency" if up
                         else "fewer pipeline stages free shared memory so more programs stay resident")
        elif "GROUP" in upper:
            parts.append(f"a {'larger' if up else 'smaller'} program group changes how tiles share L2")
        elif re.search(r"BLOCK|TILE|ELEMS", upper):
            parts.append(f"{'bigger' if up else 'smaller'} {name} "
                         + ("moves more bytes per program with fewer programs and less tail effect" if up
                            else "launches more programs to fill the SMs with less register pressure"))
        else:
            parts.append(f"{name}={new} is in the task's search space and has not been measured here")
    return "; ".join(parts) + f" ({bound}-bound kernel: only measurement can say which way wins)."
