"""Read-only access to a workspace's run files (the workspace on disk is the truth).

Paths come from ``ledger.paths`` and the results columns from ``ledger.results``: one spelling
of each, the engine's."""

from __future__ import annotations

import json
import os
from pathlib import Path

from autokernel_tui.ledger import paths
from autokernel_tui.ledger import results as _results
from autokernel_tui.ledger.paths import events_path, is_workspace, results_path, runs_dir, state_dir  # noqa: F401
from autokernel_tui.ledger.schema import upgrade_event


# What a task is, as the kernel list says it: a hand-written starter, a task generated from a
# profiled model's recorded calls (forward, or its backward), one made from a KernelBench problem
# file, a hand-written backward task.
STARTER, GENERATED, KERNELBENCH, BACKWARD = "starter", "generated", "kernelbench", "backward"
GENERATED_BACKWARD = "gen bwd"


def task_kinds(workspace: Path) -> dict[str, str]:
    """{task name: kind} for the task folders under the workspace's kernels/ (unreadable ones left out)."""
    import tomllib

    out: dict[str, str] = {}
    root = Path(workspace) / "kernels"
    for spec in sorted(root.glob("*/task.toml")) if root.is_dir() else []:
        try:
            data = tomllib.loads(spec.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        name = str(data.get("name") or spec.parent.name)
        backward = data.get("kind") == "backward"
        out[name] = (KERNELBENCH if data.get("kernelbench")
                     else (GENERATED_BACKWARD if backward else GENERATED) if data.get("generated")
                     else BACKWARD if backward else STARTER)
    return out


def run_tags(workspace: Path) -> list[str]:
    """Run tags, oldest first (by run.json / folder modification time)."""
    root = runs_dir(workspace)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir()]
    meta = paths.RUN_META_FILE
    runs.sort(key=lambda p: ((p / meta).stat().st_mtime if (p / meta).exists() else p.stat().st_mtime, p.name))
    return [p.name for p in runs]


def read_results(path: Path) -> list[dict]:
    """results.tsv rows, typed as the engine's ``result`` events carry them (ints, floats, None for
    empty), through the ledger's reader: columns renamed since the file was written are read under
    today's names, a torn last line is skipped, a line it cannot use is skipped and a bad number
    read as empty. A missing file is no rows."""
    return _results.read_rows(Path(path), typed=True)


def tail_events(path: Path, max_bytes: int = 2 * 1024 * 1024) -> list[dict]:
    """The newest events of a (possibly huge) events.jsonl, reading at most ``max_bytes``."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        handle.seek(start)
        data = handle.read()
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line is cut in the middle
    from autokernel_tui.ledger.events import check_event

    events = []
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line being written right now (or garbage: the engine reports that on resume)
        # Valid JSON that is not a usable event (a list, a wrong type) would break a viewer: skip it.
        event = check_event(upgrade_event(event) if isinstance(event, dict) else event,
                            f"{path} (line {i + 1} of the last {len(data)} bytes)", problems=[])
        if event is not None:
            events.append(event)  # an older engine's names read as today's
    return events


def catch_up_events(events: list[dict], experiment: int) -> list[dict]:
    """What a late viewer replays: the current experiment's stream since it started."""
    start = 0
    for i, event in enumerate(events):
        if event.get("type") == "experiment_started" and int(event.get("n") or 0) == experiment:
            start = i
    replay = {"experiment_started", "baseline", "agent", "proposal", "committed", "verdict"}
    return [e for e in events[start:] if e.get("type") in replay]


def measured_starts(workspace: Path, tag: str) -> set[str]:
    """Tasks whose starting kernel this run has measured (the engine saves reports/start-<task>.json)."""
    folder = paths.run_dir(workspace, tag) / paths.REPORTS_DIR
    try:
        return {p.name[len("start-"):-len(".json")] for p in folder.glob("start-*.json")}
    except OSError:
        return set()


def engine_pid(workspace: Path) -> int | None:
    """The pid in engine.lock if that process is alive, else None."""
    lock = paths.lock_path(workspace)
    try:
        pid = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def engine_is_live(workspace: Path) -> bool:
    """A live engine owns the workspace: its lock names a running process and it serves the socket."""
    try:
        from autokernel_tui.engine.lock import live_pid  # the engine's own reading of its lock
        pid = live_pid(Path(workspace))
    except ImportError:
        pid = engine_pid(workspace)
    return pid is not None and paths.socket_path(workspace).exists()
