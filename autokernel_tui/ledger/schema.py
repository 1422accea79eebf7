"""The shapes of what the engine writes and every viewer reads, in one place.

Events (events.jsonl and the control socket), results rows (``ledger.results``),
harness reports (``harness.report`` dataclasses), comparisons and the client
snapshot. The engine checks each event against ``EVENTS`` as it journals it; the
engine's tests check its snapshot and its output; the TUI's test doubles are
checked against the same functions, so a fake cannot drift from what the engine
writes.

Units: every number's name says its unit, one unit end to end (docs/ARCHITECTURE.md,
"Units"): ``_us`` / ``_s`` times, ``_pct`` percent 0-100, ``_frac`` / ``share``
fractions 0-1, ``_mib`` MiB, ``speedup*`` / ``ci_*`` ratios (> 1 = faster),
``gbps`` GB/s, ``tflops`` TFLOP/s. Names renamed since a workspace was written are
read through ``upgrade_*`` (old workspaces keep loading); see ``results.RENAMED``.

``read_report`` / ``read_comparison`` / ``read_saved`` turn what was written as JSON back into
the harness's dataclasses (the engine works with those and makes dicts only at its edges).

Stdlib plus ``harness.report`` and ``ledger.results`` only (no torch, no git).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autokernel_tui.harness.report import STAGES, STATUSES, Comparison, Report, ShapeResult, Summary
from autokernel_tui.ledger import results

COMMON = ("t", "type", "run")
# type -> (required fields, optional fields), besides COMMON (docs/ARCHITECTURE.md, "Engine").
EVENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "run_started": (("resumed", "tasks", "policy", "device", "branch", "pid"), ()),
    "state": (("state",), ()),
    "policy": (("policy",), ()),
    "task_selected": (("task", "reason", "ranking"), ()),
    "baseline": (("task", "report"), ()),
    "experiment_started": (("n", "task"), ("revert_of", "proposal")),
    # K proposals in flight (engine/parallel.py): an id, not a number; the number comes at judging.
    "proposal_started": (("id", "task"), ()),
    "proposal_ready": (("id", "task", "proposal", "texts"), ("error",)),
    "proposal_dropped": (("id", "reason"), ()),
    # judging / judged: proposals being judged ahead on the pool / judged and waiting to be recorded
    "pool": (("in_flight", "proposing", "ready", "parallel", "waiting_approval", "workers", "workers_busy",
              "experiments_per_hour"), ("judging", "judged")),
    "agent": (("n", "kind", "text"), ()),
    "proposal": (("n", "description", "hypothesis", "diff", "agent", "tokens", "cost_usd"), ()),
    "verdict": (("n", "report", "comparison"), ("judged",)),  # judged: "ahead..." (engine/judging.py)
    "committed": (("n", "commit"), ()),
    "awaiting_approval": (("n", "task", "diff", "report", "comparison", "deadline"), ()),
    "decision": (("n", "action", "by", "reason"), ()),
    "result": (("row",), ()),
    "budget": (("tokens", "cost_usd"), ()),
    "experiment_abandoned": (("n", "reason"), ()),
    "session_ended": (("reason",), ()),
    "run_finished": (("reason",), ()),
    "error": (("message",), ()),
    "repaired": (("message",), ()),
}
STATES = ("idle", "running", "paused", "awaiting_approval", "stopped")
AGENT_KINDS = ("thinking", "text", "progress", "error")
ACTIONS = ("keep", "discard", "veto", "revert")
DECIDERS = ("human", "policy", "timeout")
POLICIES = ("manual", "auto", "threshold")

# client.snapshot() (engine.loop.Engine.snapshot), its "tasks" entries (orchestrator) and "pending".
SNAPSHOT_KEYS = ("run", "state", "policy", "experiment", "task", "tasks", "best", "tokens", "cost_usd", "device",
                 "pending", "started_at", "experiments", "branch", "workspace", "pid", "repairs")
# "pool" (engine K in flight: in_flight, proposing, ready, parallel, waiting_approval, workers,
# workers_busy, experiments_per_hour), optional so older engines' snapshots still read.
SNAPSHOT_OPTIONAL = ("pool",)
TASK_KEYS = ("name", "share", "speedup", "speedup_vs_start", "state", "roofline_pct", "experiments",
             "since_improvement", "clock_s", "status", "expected_gain")
TASK_STATES = ("active", "queued", "plateaued", "done", "skipped")
PENDING_KEYS = ("n", "task", "diff", "report", "comparison", "deadline")
DEVICE_KEYS = ("name", "timing_meaningful")  # required; the harness may add more (bandwidth_gbps, ...)
# runs/<tag>/run.json (engine.runrecord.open_run)
RUN_META_KEYS = ("tag", "branch", "base", "tasks", "owned_hashes", "settings", "created_at", "finished")


def _names(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _keys(what: str, data: Any, required: set[str], optional: set[str] = frozenset()) -> list[str]:
    if not isinstance(data, dict):
        return [f"{what}: expected a dict, got {type(data).__name__}"]
    out = []
    missing = sorted(required - set(data))
    unknown = sorted(set(data) - required - set(optional))
    if missing:
        out.append(f"{what}: missing {', '.join(missing)}")
    if unknown:
        out.append(f"{what}: unknown {', '.join(unknown)}")
    return out


def _number(what: str, value: Any, allow_none: bool = True) -> list[str]:
    if value is None and allow_none:
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [f"{what}: expected a number, got {value!r}"]
    return []


def _pct(what: str, value: Any) -> list[str]:
    """A ``_pct`` is percent, 0-100 (the harness clamps the roofline at 100)."""
    out = _number(what, value)
    if not out and value is not None and not 0.0 <= value <= 100.0:
        out.append(f"{what}: a percent is 0-100, got {value!r}")
    return out


def check_report(report: Any, what: str = "report") -> list[str]:
    """A harness Report as a dict (``Report.to_dict()``): every field, nothing else."""
    out = _keys(what, report, _names(Report))
    if out:
        return out
    if report["status"] not in STATUSES:
        out.append(f"{what}.status: {report['status']!r} is not one of {STATUSES}")
    if report["stage"] not in STAGES:
        out.append(f"{what}.stage: {report['stage']!r} is not one of {STAGES}")
    if not isinstance(report["timing_meaningful"], bool):
        out.append(f"{what}.timing_meaningful: expected a bool")
    for i, shape in enumerate(report["shapes"] or []):
        where = f"{what}.shapes[{i}]"
        out += _keys(where, shape, _names(ShapeResult))
        if isinstance(shape, dict) and "roofline_pct" in shape:
            out += _pct(f"{where}.roofline_pct", shape["roofline_pct"])
    if report["summary"] is not None:
        out += _keys(f"{what}.summary", report["summary"], _names(Summary))
        if isinstance(report["summary"], dict) and "roofline_pct" in report["summary"]:
            out += _pct(f"{what}.summary.roofline_pct", report["summary"]["roofline_pct"])
    return out


def check_comparison(comparison: Any, what: str = "comparison") -> list[str]:
    """A harness Comparison as a dict, or None (no comparison was made)."""
    if comparison is None:
        return []
    out = _keys(what, comparison, _names(Comparison))
    if not out:
        for k in ("speedup", "ci_low", "ci_high"):
            out += _number(f"{what}.{k}", comparison[k], allow_none=False)
        if comparison["status"] not in STATUSES:
            out.append(f"{what}.status: {comparison['status']!r} is not one of {STATUSES}")
    return out


def check_row(row: Any, typed: bool = True, what: str = "row") -> list[str]:
    """A results row: the engine's typed row (ints and floats, as in ``result`` events) or, with
    ``typed=False``, the strings of a results.tsv line."""
    out = _keys(what, row, set(results.COLUMNS) - set(results.ADDED), set(results.ADDED))
    if out:
        return out
    if row["status"] not in results.STATUSES:
        out.append(f"{what}.status: {row['status']!r} is not one of {results.STATUSES}")
    if row["correctness"] not in STATUSES + ("",):
        out.append(f"{what}.correctness: {row['correctness']!r} is not a harness status {STATUSES} or empty")
    for c in results.COLUMNS:
        value = row.get(c, "" if not typed else None)
        if not typed:
            if not isinstance(value, str):
                out.append(f"{what}.{c}: results.tsv cells are strings, got {value!r}")
                continue
            try:
                value = results.parse_value(c, value)
            except ValueError:
                out.append(f"{what}.{c}: {value!r} does not parse")
                continue
        if c in results.INT_COLUMNS and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            out.append(f"{what}.{c}: expected an int, got {value!r}")
        elif c in results.FLOAT_COLUMNS:
            out += (_pct if c.endswith("_pct") else _number)(f"{what}.{c}", value)
        elif c not in results.INT_COLUMNS and c not in results.FLOAT_COLUMNS and not isinstance(value, str):
            out.append(f"{what}.{c}: expected a string, got {value!r}")
    return out


def check_task(task: Any, what: str = "task") -> list[str]:
    out = _keys(what, task, set(TASK_KEYS))
    if not out:
        if task["state"] not in TASK_STATES:
            out.append(f"{what}.state: {task['state']!r} is not one of {TASK_STATES}")
        out += _pct(f"{what}.roofline_pct", task["roofline_pct"])
    return out


def check_device(device: Any, what: str = "device") -> list[str]:
    if device is None:
        return []
    if not isinstance(device, dict):
        return [f"{what}: expected the harness's device_info() dict, got {device!r}"]
    out = [f"{what}: missing {k}" for k in DEVICE_KEYS if k not in device]
    if "timing_meaningful" in device and not isinstance(device["timing_meaningful"], bool):
        out.append(f"{what}.timing_meaningful: expected a bool")
    return out


def check_pending(pending: Any, what: str = "pending") -> list[str]:
    if pending is None:
        return []
    out = _keys(what, pending, set(PENDING_KEYS))
    if not out:
        out += check_report(pending["report"], f"{what}.report")
        out += check_comparison(pending["comparison"], f"{what}.comparison")
    return out


def check_snapshot(snap: Any) -> list[str]:
    out = _keys("snapshot", snap, set(SNAPSHOT_KEYS), set(SNAPSHOT_OPTIONAL))
    if out:
        return out
    if snap["state"] not in STATES:
        out.append(f"snapshot.state: {snap['state']!r} is not one of {STATES}")
    if snap["policy"] not in POLICIES:
        out.append(f"snapshot.policy: {snap['policy']!r} is not one of {POLICIES}")
    for i, task in enumerate(snap["tasks"]):
        out += check_task(task, f"snapshot.tasks[{i}]")
    out += check_device(snap["device"], "snapshot.device")
    out += check_pending(snap["pending"], "snapshot.pending")
    return out


def check_run_meta(meta: Any) -> list[str]:
    return _keys("run.json", meta, set(RUN_META_KEYS))


def check_fields(event: Any) -> list[str]:
    """The event's type and its top-level fields (what the engine checks as it journals)."""
    if not isinstance(event, dict):
        return [f"event: expected a dict, got {type(event).__name__}"]
    kind = event.get("type")
    if kind not in EVENTS:
        return [f"event: unknown type {kind!r}"]
    required, optional = EVENTS[kind]
    return _keys(f"{kind} event", event, set(COMMON + required), set(optional))


def check_event(event: Any) -> list[str]:
    """Everything about one event, down to the reports and rows it carries."""
    out = check_fields(event)
    if out:
        return out
    kind = event["type"]
    what = f"{kind} event"
    if kind == "state" and event["state"] not in STATES:
        out.append(f"{what}.state: {event['state']!r} is not one of {STATES}")
    if kind in ("policy", "run_started") and event["policy"] not in POLICIES:
        out.append(f"{what}.policy: {event['policy']!r} is not one of {POLICIES}")
    if kind == "run_started":
        out += check_device(event["device"], f"{what}.device")
    if kind == "agent" and event["kind"] not in AGENT_KINDS:
        out.append(f"{what}.kind: {event['kind']!r} is not one of {AGENT_KINDS}")
    if kind == "decision":
        if event["action"] not in ACTIONS:
            out.append(f"{what}.action: {event['action']!r} is not one of {ACTIONS}")
        if event["by"] not in DECIDERS:
            out.append(f"{what}.by: {event['by']!r} is not one of {DECIDERS}")
    if kind in ("verdict", "awaiting_approval", "baseline"):
        out += check_report(event["report"], f"{what}.report")
    if kind in ("verdict", "awaiting_approval"):
        out += check_comparison(event["comparison"], f"{what}.comparison")
    if kind == "result":
        out += check_row(event["row"], typed=True, what=f"{what}.row")
    if kind == "task_selected":
        for i, task in enumerate(event["ranking"]):
            out += check_task(task, f"{what}.ranking[{i}]")
    return out


# --- reading what older versions wrote -------------------------------------------------------
def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    return {results.RENAMED.get(k, k): v for k, v in data.items()}


def upgrade_report(report: Any) -> Any:
    """A Report dict (or None) under today's field names; values and units unchanged."""
    if not isinstance(report, dict):
        return report
    out = _renamed(report)
    if isinstance(out.get("summary"), dict):
        out["summary"] = _renamed(out["summary"])
    if isinstance(out.get("shapes"), list):
        out["shapes"] = [_renamed(s) if isinstance(s, dict) else s for s in out["shapes"]]
    return out


def upgrade_saved(saved: Any) -> Any:
    """A reports/*.json file: ``{"report", "comparison"}`` (exp-N) or a bare Report (start-TASK)."""
    if not isinstance(saved, dict):
        return saved
    if "report" in saved and "status" not in saved:
        return {**saved, "report": upgrade_report(saved["report"])}
    return upgrade_report(saved)


# --- typed reading: what was written as JSON, back into the harness's dataclasses ---------------
def _num(value: Any) -> float | None:
    """A finite number, or None (a hand-edited or damaged value is read as unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _numbers(cls: Any, data: dict[str, Any], text: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data``'s fields of dataclass ``cls``, each optional number a number or None."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            value = data[f.name]
            out[f.name] = (value if isinstance(value, str) else "") if f.name in text else \
                value if f.name not in _NUMERIC[cls] else _num(value)
    return out


_NUMERIC = {
    Summary: {"latency_us", "speedup_vs_baseline", "speedup_vs_compile", "roofline_pct", "worst_speedup", "gbps",
              "tflops"},
    ShapeResult: {"max_abs_err", "rel_l2_err", "median_us", "p20_us", "p80_us", "baseline_us", "compile_ref_us",
                  "speedup_vs_baseline", "speedup_vs_compile", "gbps", "tflops", "roofline_pct"},
}


def read_report(data: Any) -> Report | None:
    """A Report from what was written as JSON (reports/*.json, an event, a plugin harness's dict),
    under today's names (``upgrade_report``), through ``Report.from_dict``. Missing summary or shape
    fields read as unknown, a number that is not one as None; None when there is no report at all
    (not an object, or no status)."""
    data = upgrade_report(data)
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        return None
    clean = {k: v for k, v in data.items() if k not in ("summary", "shapes")}
    for name, default in (("compile_s", 0.0), ("wall_s", 0.0), ("peak_vram_mib", 0.0)):
        if name in clean:
            clean[name] = _num(clean[name]) if _num(clean[name]) is not None else default
    for name in ("reason", "stage", "task", "device", "stderr_tail", "sandbox"):
        if name in clean and not isinstance(clean[name], str):
            clean[name] = str(clean[name])
    clean["timing_meaningful"] = data.get("timing_meaningful") is True
    if not isinstance(clean.get("time_split", {}), dict):
        clean["time_split"] = {}
    summary = data.get("summary")
    if isinstance(summary, dict) and summary:
        clean["summary"] = {**{f.name: None for f in dataclasses.fields(Summary)}, "worst_shape": "",
                            **_numbers(Summary, summary, text=("worst_shape",))}
    shapes = data.get("shapes")
    clean["shapes"] = [{"shape": "", "dims": {}, "dtype": "", **_numbers(ShapeResult, s, text=("shape", "dtype")),
                        "passed": s.get("passed") is True}
                       for s in (shapes if isinstance(shapes, list) else []) if isinstance(s, dict)]
    for s in clean["shapes"]:
        s["dims"] = s["dims"] if isinstance(s["dims"], dict) else {}
    return Report.from_dict(clean)


def read_comparison(data: Any) -> Comparison | None:
    """A Comparison from what was written as JSON, through ``Comparison.from_dict``; None when
    there is none (null, not an object, or no speedup). Fields it lacks read as unknown (an
    experiment rebuilt from its commit's trailers knows only the speedup and its interval)."""
    if not isinstance(data, dict) or _num(data.get("speedup")) is None:
        return None
    clean = {"ci_low": None, "ci_high": None, "faster": False, "n_samples": 0, "method": "", **data}
    clean["speedup"] = _num(data["speedup"])
    clean["ci_low"], clean["ci_high"] = _num(clean["ci_low"]), _num(clean["ci_high"])
    clean["faster"] = clean["faster"] is True
    return Comparison.from_dict(clean)


def read_saved(data: Any) -> tuple[Report | None, Comparison | None]:
    """A reports/exp-N.json file (``{"report", "comparison"}``) as (Report, Comparison), either None."""
    data = upgrade_saved(data)
    if not isinstance(data, dict):
        return None, None
    return read_report(data.get("report")), read_comparison(data.get("comparison"))


def upgrade_task(task: Any) -> Any:
    """A ranked task (snapshot "tasks", task_selected "ranking"). Before issue 24 its
    ``pct_roofline`` was a FRACTION (the engine divided the harness's percent by 100)."""
    if not isinstance(task, dict) or "pct_roofline" not in task:
        return task
    out = {k: v for k, v in task.items() if k != "pct_roofline"}
    frac = task["pct_roofline"]
    out["roofline_pct"] = None if frac is None else 100.0 * frac
    return out


def upgrade_event(event: Any) -> Any:
    """One event as an older engine journaled it, under today's names."""
    if not isinstance(event, dict):
        return event
    kind = event.get("type")
    if kind == "result" and isinstance(event.get("row"), dict):
        return {**event, "row": results.upgrade_row(event["row"])}
    if kind in ("verdict", "awaiting_approval", "baseline") and "report" in event:
        return {**event, "report": upgrade_report(event["report"])}
    if kind == "task_selected" and isinstance(event.get("ranking"), list):
        return {**event, "ranking": [upgrade_task(t) for t in event["ranking"]]}
    return event
