"""Does the app stay responsive while the agent streams and results pile up?

Headless Textual app on the CPU, a fake engine client streaming 200 tokens/s
(one event per token, the worst case: the engine batches), a results table
holding 10,000 rows loaded from results.tsv. Measured:

* key-to-screen latency: key posted to the app -> its effect is in the
  widgets -> the next frame Textual paints after that, per key;
* frame time: how long each painted update took (Screen._compositor_refresh),
  and one full-screen composite at the benchmark's terminal size;
* event-loop stall: how late a 10 ms timer fires while all this happens
  (what a user feels as lag);
* CPU use of the process while streaming.

Usage: python benchmarks/tui_responsiveness.py [--seconds 8] [--rows 10000] [--tps 200]
Prints a table; writes benchmarks/results/tui_responsiveness.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(ROOT))

from autokernel_tui.ledger.results import HEADER, format_row  # noqa: E402
from autokernel_tui.tui.app import AutokernelApp  # noqa: E402
from autokernel_tui.tui.widgets.results_table import ResultsTable  # noqa: E402
from autokernel_tui.tui.workspace_files import results_path  # noqa: E402
from tests.tui.fakes import NOW, TAG, FakeClient, make_workspace, pending_event, row  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else float("nan")


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": pct(values, 0.5), "p95_ms": pct(values, 0.95), "max_ms": max(values, default=float("nan")),
            "mean_ms": statistics.fmean(values) if values else float("nan")}


class Streamer(threading.Thread):
    """Pushes agent tokens at a fixed rate from a background thread, like the engine's client thread."""

    def __init__(self, client: FakeClient, tps: float) -> None:
        super().__init__(daemon=True)
        self.client, self.tps, self.stop = client, tps, threading.Event()
        self.sent = 0

    def run(self) -> None:
        start = time.perf_counter()
        while not self.stop.is_set():
            self.client.emit({"type": "agent", "n": 7, "kind": "thinking" if self.sent % 400 < 200 else "text",
                              "text": f"tok{self.sent % 97} "})
            self.sent += 1
            delay = start + self.sent / self.tps - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


async def measure(args) -> dict:
    from textual.screen import Screen

    rows = [row(i, ("keep", "discard", "fail", "discard", "crash")[i % 5], speed=round(1 + (i * 37 % 100) / 100, 2),
                task=("rmsnorm", "softmax")[i % 2]) for i in range(1, args.rows + 1)]
    # Git commits only for the first rows (10,000 commits take minutes to make and the live
    # screen never reads them); results.tsv then gets every row.
    ws = make_workspace(Path(tempfile.mkdtemp()) / "ws", rows=rows[:20])
    with open(results_path(ws, TAG), "w", encoding="utf-8") as handle:
        handle.write(HEADER + "\n")  # the engine's header and cell format (ledger.results)
        handle.writelines(format_row(r) + "\n" for r in rows)
    client = FakeClient()
    app = AutokernelApp(ws, client=client, clock=lambda: NOW)
    latencies: dict[str, list[float]] = {"p pause/resume": [], "s sort results": [], "a approve": [],
                                         "? help open": [], "esc help close": []}
    frames: list[float] = []  # every screen update Textual painted during the run
    full: list[float] = []
    stalls: list[float] = []
    painted: list[float] = []
    cpu_ms: dict[str, list[float]] = {}  # CPU this process spent per key: independent of other load

    original_refresh = Screen._compositor_refresh

    def timed_refresh(screen_self):
        t = time.perf_counter()
        original_refresh(screen_self)
        now = time.perf_counter()
        frames.append((now - t) * 1000)
        painted.append(now)

    Screen._compositor_refresh = timed_refresh
    try:
        async with app.run_test(size=(args.width, args.height)) as pilot:
            await pilot.pause(0.5)
            screen = app.screen
            table = screen.query_one(ResultsTable)
            assert table.row_count == args.rows, table.row_count
            table.focus()
            table.move_cursor(column=3)
            await pilot.pause(0.2)

            async def stall_probe(stop: asyncio.Event) -> None:
                while not stop.is_set():
                    t = time.perf_counter()
                    await asyncio.sleep(0.010)
                    stalls.append((time.perf_counter() - t - 0.010) * 1000)

            async def key(name: str, key_name: str, done) -> None:
                """Key press -> the change is made -> the next painted frame after it."""
                t, c = time.perf_counter(), time.process_time()
                app.simulate_key(key_name)
                while not done():
                    await asyncio.sleep(0.0005)
                changed = time.perf_counter()
                while not painted or painted[-1] < changed:
                    await asyncio.sleep(0.0005)
                latencies[name].append((painted[-1] - t) * 1000)
                cpu_ms.setdefault(name, []).append((time.process_time() - c) * 1000)

            streamer = Streamer(client, args.tps)
            stop = asyncio.Event()
            probe = asyncio.create_task(stall_probe(stop))
            frames.clear()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            streamer.start()
            deadline = time.perf_counter() + args.seconds
            i = 0
            while time.perf_counter() < deadline:
                paused = screen.state.state == "paused"
                await key("p pause/resume", "p", lambda p=paused: (screen.state.state == "paused") != p)
                before = table.sorted_by
                await key("s sort results", "s", lambda b=before: table.sorted_by != b)
                client.emit(pending_event(100 + i))
                await asyncio.sleep(0.05)
                await key("a approve", "a", lambda: not screen.awaiting)
                await key("? help open", "question_mark", lambda: app.screen is not screen)
                await key("esc help close", "escape", lambda: app.screen is screen)
                t = time.perf_counter()
                screen._compositor.render_update(full=True)
                full.append((time.perf_counter() - t) * 1000)
                await asyncio.sleep(0.2)
                i += 1
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0
            streamer.stop.set()
            stop.set()
            await probe
            tokens = streamer.sent
            buffered = len(screen.state.reasoning)
            rows_now = table.row_count
    finally:
        Screen._compositor_refresh = original_refresh
    return {
        "benchmark": "tui_responsiveness",
        "command": "python benchmarks/tui_responsiveness.py " + " ".join(sys.argv[1:]),
        "terminal": f"{args.width}x{args.height}",
        "results_rows_at_start": args.rows,
        "results_rows_at_end": rows_now,
        "tokens_per_s_target": args.tps,
        "tokens_per_s_achieved": tokens / wall,
        "seconds": wall,
        "key_to_screen": {k: summary(v) for k, v in latencies.items()},
        "key_cpu": {k: summary(v) for k, v in cpu_ms.items()},
        "load_average_1m": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
        "frame_painted": summary(frames),
        "frame_full_redraw": summary(full),
        "event_loop_stall": summary(stalls),
        "cpu_percent": 100 * cpu / wall,
        "reasoning_chars_held": buffered,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpu": platform.processor() or platform.machine()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--tps", type=float, default=200.0)
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tui_responsiveness.json"))
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    print(f"TUI responsiveness: {result['results_rows_at_start']} result rows, "
          f"{result['tokens_per_s_achieved']:.0f} tokens/s streamed, {result['terminal']}, {result['seconds']:.1f} s")
    print(f"{'measure':<32}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    rows = [(f"key: {k}", v) for k, v in result["key_to_screen"].items()]
    rows += [("frame: each painted update", result["frame_painted"]), ("frame: full redraw", result["frame_full_redraw"]),
             ("event-loop stall (10ms timer)", result["event_loop_stall"])]
    for name, s in rows:
        print(f"{name:<32}{s['n']:>5}{s['p50_ms']:>10.1f}{s['p95_ms']:>10.1f}{s['max_ms']:>10.1f}")
    print("CPU ms per key (load-independent): " + ", ".join(
        f"{k.split()[0]} {v['p50_ms']:.0f}" for k, v in result["key_cpu"].items()))
    print(f"machine load average {result['load_average_1m']:.1f} on {result['cpu_count']} cores (wall times include waiting for the CPU)")
    print(f"CPU while streaming: {result['cpu_percent']:.0f}% of one core; reasoning held: {result['reasoning_chars_held']} chars")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
