"""The CLI items of issue 25 (a newcomer's common mistakes), each through the real command.

A typo'd subcommand, the demo's folder and exit hint, `status` outside a workspace, a failed
`init`, `run` outside a workspace, the profiler's noise, `bench`'s table, and `init --from-profile`
saying which ops it skipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel_tui.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _cli(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "autokernel_tui", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, env=full)


def _suggested(err: str) -> list[str]:
    """The first `autokernel-tui ...` command quoted in backticks in ``err``, as argv (without the program)."""
    found = re.search(r"`autokernel-tui ([^`]+)`", err)
    assert found, err
    return shlex.split(found.group(1))


# --- a typo'd subcommand ---------------------------------------------------------------------

def test_a_typo_of_a_command_is_an_error_naming_it_and_makes_no_folder(tmp_path):
    done = _cli(["stauts"], tmp_path)
    assert done.returncode == 2, done
    assert "status" in done.stderr and "did you mean" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no ./stauts, nothing else


def test_an_unknown_word_that_is_no_folder_opens_nothing_and_creates_nothing(tmp_path):
    done = _cli(["my-project"], tmp_path)
    assert done.returncode == 2, done
    assert "does not exist" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_folder_named_like_a_command_is_still_opened_as_a_folder(tmp_path, monkeypatch):
    from autokernel_tui import cli

    assert cli.mistyped_command("stauts", {"status"})  # no such folder here: a typo
    (tmp_path / "stauts").mkdir()
    monkeypatch.chdir(tmp_path)
    assert cli.mistyped_command("stauts", {"status"}) is None  # a folder here wins
    assert cli.mistyped_command("./stauts", {"status"}) is None


# --- the demo --------------------------------------------------------------------------------

def test_the_demo_lives_outside_the_checkout_and_its_hint_resumes_it(tmp_path, monkeypatch):
    from autokernel_tui.commands import demo
    from autokernel_tui.tui import engine_link, launch

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    data = tmp_path / "data"
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.delenv("AUTOKERNEL_HARNESS_QUICK", raising=False)  # restored after the test
    seen: dict = {}

    class Client:
        def close(self):
            pass

    monkeypatch.setattr(engine_link, "start_in_process", lambda ws, settings, **kw: Client())

    def fake_run_live(workspace, settings, client, attached, headless_args=(), notes=(), resume_command=None):
        seen.update(workspace=workspace, resume=resume_command, headless_args=list(headless_args), notes=list(notes),
                    quick=settings.harness.quick)
        return 0

    monkeypatch.setattr(launch, "run_live", fake_run_live)
    assert main(["demo"]) == 0
    ws = seen["workspace"]
    assert ws == (data / "autokernel-tui" / "demo").resolve() == demo.default_dir().resolve()
    assert (ws / "kernels" / "rmsnorm" / "task.toml").is_file()
    assert list(checkout.iterdir()) == [checkout / ".git"]  # nothing left in the user's checkout
    assert seen["resume"] == f"autokernel-tui demo -C {shlex.quote(str(ws))}"
    assert _suggested(f"`{seen['resume']}`")[:3] == ["demo", "-C", str(ws)]
    assert seen["headless_args"][:4] == ["--agent", "tuner", "--policy", "manual"]
    assert seen["quick"] and os.environ["AUTOKERNEL_HARNESS_QUICK"] == "1"  # a headless hand-over keeps it
    assert f"autokernel-tui -C {shlex.quote(str(ws))}" in seen["notes"][0]


def test_the_demo_folder_without_xdg_is_under_the_home(tmp_path):
    from autokernel_tui.commands.demo import default_dir

    assert default_dir(env={}, home=tmp_path) == tmp_path / ".local" / "share" / "autokernel-tui" / "demo"
    assert default_dir(env={"XDG_DATA_HOME": "relative"}, home=tmp_path).is_relative_to(tmp_path)


def test_the_stop_hint_names_the_command_it_was_given(tmp_path, monkeypatch, capsys):
    """What the app prints after 'stop' is the caller's resume command (the demo's), else the app on
    that workspace, never a bare `autokernel-tui` that would open whatever folder the user is in."""
    import autokernel_tui.tui.app as app_module
    from autokernel_tui.tui import engine_link, launch
    from autokernel_tui.tui.screens.quit_screen import STOP

    class App:
        def __init__(self, *a, **k):
            pass

        def run(self):
            return STOP

    monkeypatch.setattr(app_module, "AutokernelApp", App)
    monkeypatch.setattr(engine_link, "stop_and_close", lambda client: None)
    settings = type("S", (), {"keys": {}, "harness": type("H", (), {"quick": False})()})()
    launch.run_live(tmp_path, settings, object(), attached=False, resume_command="autokernel-tui demo -C /x")
    assert "resume with: autokernel-tui demo -C /x" in capsys.readouterr().err
    launch.run_live(tmp_path, settings, object(), attached=False)
    assert f"resume with: autokernel-tui -C {shlex.quote(str(tmp_path))}" in capsys.readouterr().err


# --- status, init and run outside a workspace -------------------------------------------------

def test_status_outside_a_workspace_suggests_a_command_that_works(tmp_path, capsys):
    target = tmp_path / "ws"
    target.mkdir()
    assert main(["status", str(target)]) == 2
    err = capsys.readouterr().err
    assert "not a workspace" in err
    suggested = _suggested(err)
    assert main(suggested) == 0, capsys.readouterr().err  # the suggestion works as typed
    capsys.readouterr()
    assert main(["status", str(target)]) == 2  # a workspace now: no run yet, and how to start one
    err = capsys.readouterr().err
    assert "no run yet" in err and "run --headless -C" in err


def test_a_failed_init_leaves_no_half_made_workspace(tmp_path, capsys):
    fresh = tmp_path / "new"
    assert main(["init", str(fresh), "--task", "rmsnorm", "--task", "no_such_task"]) == 2
    assert "no_such_task" in capsys.readouterr().err
    assert not fresh.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_profile = tmp_path / "p.json"
    bad_profile.write_text("{not json")
    assert main(["init", str(empty), "--from-profile", str(bad_profile)]) == 2
    assert list(empty.iterdir()) == []


def test_run_outside_a_workspace_leaves_nothing_behind(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    done = _cli(["run", "--headless", "--agent", "tuner", "-C", str(plain)], tmp_path)
    assert done.returncode == 2, done
    assert "not a workspace" in done.stderr and "autokernel-tui init" in done.stderr
    assert list(plain.iterdir()) == []  # no .autokernel/engine.lock
    done = _cli(["run", "--headless", "--agent", "tuner"], plain)
    assert done.returncode == 2 and list(plain.iterdir()) == []


# --- profile's noise ---------------------------------------------------------------------------

NOISY_PROFILE = """
import os, sys
from autokernel_tui.profiling import pipeline
def noisy(*a, **k):
    os.write(2, b"[W1204 11:00:00.000 kineto_shim.cpp:437] gpuGetDeviceCount failed with code 35\\n")
    os.write(2, b"STAGE:2026-12-04 11:00:00 123:123 ActivityProfilerController.cpp:312] Completed Stage: Warm Up\\n")
    os.write(2, b"a real warning the user must see\\n")
    return {"families": [], "model": "m", "model_args": {}, "total_us": 0.0}
pipeline.run_profile = noisy
import autokernel_tui.profiling.amdahl as amdahl
amdahl.format_table = lambda profile, limit=20: "TABLE"
from autokernel_tui.cli import main
sys.exit(main(["profile", "gpt2-tiny"]))
"""


def test_profile_prints_no_profiler_noise_but_keeps_other_stderr(tmp_path):
    done = subprocess.run([sys.executable, "-c", NOISY_PROFILE], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done
    assert "TABLE" in done.stdout
    assert "gpuGetDeviceCount" not in done.stderr and "Completed Stage" not in done.stderr
    assert "a real warning the user must see" in done.stderr


def test_the_noise_filter_passes_everything_else_and_restores_stderr(capfd):
    from autokernel_tui.profiling.quiet import filtered_stderr, is_noise

    assert is_noise("[W kineto_shim.cpp:437] gpuGetDeviceCount failed with code 35")
    assert not is_noise("RuntimeError: CUDA out of memory")
    with filtered_stderr():
        os.write(2, b"gpuGetDeviceCount failed with code 35\nkept line\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert err == "kept line\nafter\n"


# --- bench's table -----------------------------------------------------------------------------

def test_bench_table_columns_line_up_under_their_headers():
    from autokernel_tui.commands.bench import SHAPE_COLUMNS, table

    rows = [["a-very-long-shape-name-1", "bfloat16", "12345", "12000-13000", "42.0", "99.10", "18.0", "1.23",
             "0.456", "1234", "12.3", "95.5", "1.2e-03", "disturbed"],
            ["s", "float32", "1.00", "0.90-1.10", "31.0", "2.00", "9.00", "2", "-", "5", "-", "-", "0.0e+00",
             "host-bound"]]
    lines = table(rows)
    header = lines[0]
    for line, cells in zip(lines[1:], rows):
        # every cell is separated from the next by at least two spaces
        assert re.split(r"\s{2,}", line.strip()) == [c for c in cells]
        # right-aligned columns end where their header ends; left-aligned ones start where it starts
        pos = 0
        hpos = 0
        for (name, left), cell in zip(SHAPE_COLUMNS, cells):
            hstart = header.index(name, hpos)
            start = line.index(cell, pos)
            if left:
                assert start == hstart, (name, line)
            else:
                assert start + len(cell) == hstart + len(name), (name, line)
            pos, hpos = start + len(cell), hstart + len(name)


def test_bench_says_host_us_beside_device_time_and_which_shapes_are_host_bound():
    # Issue 21: host us per call beside the device time; a shape whose host work exceeds its device
    # time is host-bound (an eager model pays the host time); a disturbed one says so first.
    from autokernel_tui.commands.bench import render
    from autokernel_tui.harness.report import Report, ShapeResult

    shapes = [ShapeResult(shape="small", dims={}, dtype="bfloat16", passed=True, median_us=10.0, p20_us=9.0,
                          p80_us=11.0, host_us=42.0, baseline_us=20.0, baseline_host_us=12.0),
              ShapeResult(shape="big", dims={}, dtype="bfloat16", passed=True, median_us=900.0, p20_us=890.0,
                          p80_us=910.0, host_us=40.0, baseline_us=950.0, baseline_host_us=12.0),
              ShapeResult(shape="noisy", dims={}, dtype="bfloat16", passed=True, median_us=50.0, p20_us=20.0,
                          p80_us=90.0, host_us=30.0, disturbed="p20-p80 spread 4.50x after a retake")]
    out = render(Report(status="PASS", task="t", device="NVIDIA H200", timing_meaningful=True, shapes=shapes))
    lines = {ln.split()[0]: ln for ln in out.splitlines()[2:5]}
    assert "host us" in out and "eager host" in out
    assert lines["small"].rstrip().endswith("host-bound") and "42.0" in lines["small"]
    assert not lines["big"].rstrip().endswith(("host-bound", "disturbed"))
    assert lines["noisy"].rstrip().endswith("disturbed")
    cpu = render(Report(status="PASS", task="t", device="cpu", timing_meaningful=False, shapes=shapes))
    assert "host-bound" not in cpu  # the interpreter's host time is the computation itself


# --- init --from-profile --top N ---------------------------------------------------------------

def _family(rank, name, task, dims, dtype="float32"):
    return {"rank": rank, "family": name, "task": task, "share": 0.1, "time_us": 10.0, "headroom": 2.0, "gain": 1.1,
            "shapes": [{"dims": dims, "dtype": dtype, "time_us": 10.0}]}


def test_init_from_a_profile_names_every_op_it_skipped_and_why(tmp_path, capsys):
    profile = {"model": "tiny", "device": "cpu", "time_kind": "cpu", "total_us": 100.0,
               "model_args": {"dtype": "float32", "batch": 2, "seq": 16},
               "families": [
                   _family(1, "flash_attention", "flash_attention", {"B": 2, "H": 4, "KVH": 4, "S": 16, "D": 16}),
                   _family(2, "rmsnorm", "rmsnorm", {"M": 32, "N": 64}),
                   _family(3, "aten::embedding", None, {"M": 1}),
                   _family(4, "softmax", "softmax", {"X": 3}),
               ]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    ws = tmp_path / "ws"
    assert main(["init", str(ws), "--from-profile", str(path), "--top", "5"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "tasks: rmsnorm" in out
    assert re.search(r"no task for \d+ item", out), out
    assert re.search(r"  flash_attention \(10\.0%\): .*float32", out), out
    assert re.search(r"  aten::embedding \(10\.0%\): no hand-written starter", out), out
    assert re.search(r"  softmax \(10\.0%\): .*shape", out), out


PROGRESS_THROUGH_THE_FILTER = """
import os, sys
from autokernel_tui.profiling.quiet import filtered_stderr, terminal_stderr
with terminal_stderr() as err, filtered_stderr():
    err.write("bar 1/2\\r")  # a progress bar redraws its line without a newline
    err.flush()
    os.write(2, b"gpuGetDeviceCount failed with code 35\\n")
    print("TOLD", file=sys.stdout, flush=True)
    sys.stdin.readline()     # the parent has seen the bar's partial line by now, or the test fails
    err.write("bar 2/2\\n")
"""


def test_a_progress_bar_reaches_the_terminal_at_once_past_the_noise_filter(tmp_path):
    """The bar's carriage-return redraws are not held back by the line-by-line filter."""
    import select

    proc = subprocess.Popen([sys.executable, "-c", PROGRESS_THROUGH_THE_FILTER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline() == b"TOLD\n"
        ready, _, _ = select.select([proc.stderr], [], [], 10)
        assert ready, "the partial progress line was held back"
        assert os.read(proc.stderr.fileno(), 100).startswith(b"bar 1/2\r")
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        rest = proc.stderr.read()
        assert proc.wait(30) == 0
        assert b"bar 2/2" in rest and b"gpuGetDeviceCount" not in rest
    finally:
        proc.kill()
