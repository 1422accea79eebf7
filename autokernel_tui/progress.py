"""Progress of long CLI work (verify, profile, bench) on stderr, with an estimate of the time left.

On a terminal: a rich progress bar (stage, bar, done/total, elapsed, ~left), redrawn by rich. Not a
terminal (a log file, CI, ``nohup``): one plain line when the stage changes and then every
``every_s`` seconds while it runs, so a 14-minute ``verify`` on the CPU is never 14 minutes of
silence. Standard library only, rich imported lazily (bench and profile must run on a bare GPU box);
stdout stays for the command's result.

The long calls take an optional ``progress`` callback::

    progress(stage: str, done: float | None = None, total: float | None = None, left_s: float | None = None)

``stage`` says what runs now, ``done``/``total`` count its units (forward passes, profiled steps),
``left_s`` is the caller's own estimate of the seconds left for the whole command (``Estimate``
below makes one from measured unit costs). Without ``left_s`` the estimate is the stage's own rate,
or, for work with no units at all (a harness evaluation seen from outside), the last run's duration
(``remember``/``recall``, kept under ``~/.cache/autokernel-tui/durations.json``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

ProgressFn = Callable[..., None]


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}:{s % 60:02d}"


def nothing(stage: str, done: float | None = None, total: float | None = None, left_s: float | None = None) -> None:
    """The callback to use when nobody watches."""


class Estimate:
    """Seconds left from the work still to do, counted in units of a few kinds whose cost is measured
    as they run (e.g. a forward pass of the original model and of the patched one)."""

    def __init__(self) -> None:
        self.todo: dict[str, float] = {}
        self._spent: dict[str, tuple[float, float]] = {}  # kind -> (seconds, units)

    def plan(self, kind: str, units: float) -> None:
        self.todo[kind] = self.todo.get(kind, 0.0) + units

    def did(self, kind: str, seconds: float, units: float = 1.0) -> None:
        s, n = self._spent.get(kind, (0.0, 0.0))
        self._spent[kind] = (s + seconds, n + units)
        self.todo[kind] = max(0.0, self.todo.get(kind, 0.0) - units)

    def cost(self, kind: str) -> float | None:
        s, n = self._spent.get(kind, (0.0, 0.0))
        return s / n if n else None

    def left_s(self) -> float | None:
        """None until every kind with work left has a measured cost."""
        total = 0.0
        for kind, units in self.todo.items():
            if units <= 0:
                continue
            c = self.cost(kind)
            if c is None:
                return None
            total += units * c
        return total


def _durations_path() -> Path:
    base = os.environ.get("AUTOKERNEL_CACHE_DIR") or str(Path.home() / ".cache" / "autokernel-tui")
    return Path(base) / "durations.json"


def recall(key: str) -> float | None:
    """How long the work called ``key`` took last time here (seconds), if known."""
    try:
        value = json.loads(_durations_path().read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def remember(key: str, seconds: float) -> None:
    path = _durations_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[key] = round(float(seconds), 2)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=0), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a read-only home: no estimate next time, nothing worse
        pass


class Progress:
    """The reporter. Use as a context manager; call it (it is the ``progress`` callback)."""

    def __init__(self, title: str, stream: TextIO | None = None, tty: bool | None = None, every_s: float = 15.0,
                 expected_s: float | None = None, quiet_s: float = 5.0):
        self.title = title
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s
        self.expected_s = expected_s  # the whole command's expected duration (from `recall`), if known
        self.t0 = time.monotonic()
        self.stage = ""
        self.stage_t0 = self.t0
        self.done: float | None = None
        self.total: float | None = None
        self.caller_left_s: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rich = None
        self._task = None
        self._last_line = 0.0
        # Plain lines are held for the first ``quiet_s`` seconds: a command that fails at once (a model
        # file that does not import) says its error alone, on one line, with no progress around it.
        self.quiet_s = quiet_s
        self._held: list[str] | None = []

    # --- what is shown ----------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def left_s(self) -> float | None:
        if self.caller_left_s is not None:
            return self.caller_left_s
        if self.done and self.total and self.done < self.total:
            rate = (time.monotonic() - self.stage_t0) / self.done
            return rate * (self.total - self.done)
        if self.expected_s is not None:
            return max(0.0, self.expected_s - self.elapsed_s())
        return None

    def line(self) -> str:
        parts = [f"{self.title}: {self.stage or 'starting'}"]
        if self.total:
            parts.append(f"{self.done or 0:g}/{self.total:g}")
        parts.append(f"{fmt_s(self.elapsed_s())} elapsed")
        left = self.left_s()
        if left is not None:
            parts.append(f"~{fmt_s(left)} left" + (" (as last time)" if self.caller_left_s is None and not self.total
                                                  and self.expected_s is not None else ""))
        return ", ".join(parts)

    # --- the callback -------------------------------------------------------------------------------
    def __call__(self, stage: str, done: float | None = None, total: float | None = None,
                 left_s: float | None = None) -> None:
        with self._lock:
            changed = stage != self.stage
            if changed:
                self.stage, self.stage_t0 = stage, time.monotonic()
            self.done, self.total = done, total
            if left_s is not None:
                self.caller_left_s = left_s
            elif changed:
                self.caller_left_s = None
            if self._rich is not None:
                self._rich_update()
            elif changed:
                self._print()

    def _print(self) -> None:
        self._last_line = time.monotonic()
        if self._held is not None and self.elapsed_s() < self.quiet_s:
            self._held.append(self.line())
            return
        self._release()
        self._write(self.line())

    def _release(self) -> None:
        held, self._held = self._held or [], None
        for text in held:
            self._write(text)

    def _write(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # the stream went away: progress is never worth a crash
            pass

    def _rich_update(self) -> None:
        left = self.left_s()
        self._rich.update(self._task, description=f"{self.title}: {self.stage}", completed=self.done or 0,
                          total=self.total, left=f"~{fmt_s(left)} left" if left is not None else "")

    def _heartbeat(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._rich is not None:
                    self._rich_update()  # the estimate moves with the clock
                elif self._held and self.elapsed_s() >= self.quiet_s:
                    self._release()
                elif time.monotonic() - self._last_line >= self.every_s:
                    self._print()

    # --- lifetime -----------------------------------------------------------------------------------
    def __enter__(self) -> "Progress":
        if self.tty:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, Progress as RichProgress, ProgressColumn, TextColumn
                from rich.progress import TimeElapsedColumn
                from rich.text import Text

                class Count(ProgressColumn):
                    def render(self, task) -> Text:
                        return Text(f"{task.completed:g}/{task.total:g}" if task.total else "", justify="right")

                self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), Count(),
                                          TimeElapsedColumn(), TextColumn("{task.fields[left]}"),
                                          console=Console(file=self.stream), transient=True)
                self._task = self._rich.add_task(self.title, total=None, left="")
                self._rich.start()
            except ImportError:
                self._rich = None
        self._thread = threading.Thread(target=self._heartbeat, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        if exc[0] is not None and self._held is not None and self.elapsed_s() < self.quiet_s:
            return  # failed at once: the error is the whole story
        self._release()
        self._write(f"{self.title}: {'done' if exc[0] is None else 'stopped'} after {fmt_s(self.elapsed_s())}")


def evaluate_with_progress(harness, task_dir, quick: bool = False, stream: TextIO | None = None,
                           tty: bool | None = None, every_s: float = 15.0):
    """``harness.evaluate(task_dir, quick=quick)`` with progress, seen from outside the harness (its
    public calls only): starting the judge (``device_info``: torch, triton, the device), then the
    evaluation as one stage, its estimate the last evaluation of this task on this device."""
    task = Path(task_dir).resolve().name
    with Progress(f"bench {task}", stream=stream, tty=tty, every_s=every_s) as progress:
        progress("starting the harness judge (import torch and triton, find the device)")
        device = str(harness.device_info().get("name") or "device")
        key = f"bench:{task}:{device}:{'quick' if quick else 'full'}"
        progress.expected_s = None
        expected = recall(key)
        t0 = time.monotonic()
        progress.t0 = t0
        progress.expected_s = expected
        progress(f"checking and timing on {device} (static, smoke, every shape, stability, determinism, timing; "
                 "the eager and torch.compile baselines once per device and task)")
        report = harness.evaluate(task_dir, quick=quick)
        if getattr(report, "status", "") == "PASS":
            remember(key, time.monotonic() - t0)
    return report


def step_reporter(progress: ProgressFn) -> Callable[..., None]:
    """An ``on_step(stage, done, total, seconds)`` for ``profiling.capture.profile_bundle`` that tells
    ``progress`` the time left: the steps still to run (warm-up and profiled, planned when each stage
    is first heard of), each at the mean cost of the steps measured so far."""
    est = Estimate()
    seen: set[str] = set()

    def on_step(stage: str, done, total, seconds) -> None:
        if total and stage not in seen:
            seen.add(stage)
            est.plan("step", total)
        if seconds is not None:
            est.did("step", seconds)
        progress(stage, done, total, est.left_s())

    return on_step
