"""A candidate that segfaults, hangs, exits or eats memory costs one evaluation: its
contestant is killed and replaced, and the caller carries on; nothing outlives the engine."""

from __future__ import annotations

import os

import pytest

from autokernel_tui.harness.runner import Harness

from .conftest import GOOD, PREFIX, REPO

SEGFAULT = PREFIX + '''

@triton.jit
def _wild(X, Y, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols.to(tl.int64) * 4000000000000)  # far outside any allocation
    tl.store(Y + cols, x)


def kernel_fn(x, weight, eps):
    y = torch.empty_like(x)
    _wild[(1,)](x, y, BLOCK=16)
    return y
'''

HANG = PREFIX + '''
def kernel_fn(x, weight, eps):
    n = 0
    while n >= 0:
        n += 1
    return launch(x, weight, eps, torch.empty_like(x))
'''

MEMORY_HOG = PREFIX + '''
def kernel_fn(x, weight, eps):
    hoard = []
    while len(hoard) < 10000:
        hoard.append(torch.ones(256 << 20, dtype=torch.uint8))  # 256 MiB at a time, touched
    return launch(x, weight, eps, torch.empty_like(x))
'''


@pytest.fixture(scope="module")
def strict_harness():
    h = Harness(timeout_s=10, device="cpu", memory_limit_mb=2000)
    yield h
    h.close()


@pytest.fixture(scope="module")
def lean_harness():
    # A generous deadline: the memory limit, not the clock, must stop the hog (on a loaded CI box
    # touching 2 GB can take longer than the 10 s the hang test allows).
    h = Harness(timeout_s=120, device="cpu", memory_limit_mb=1500)
    yield h
    h.close()


def test_segfault_is_a_crash_and_the_worker_restarts(harness, tiny_task):
    restarts = harness.restarts
    report = harness.evaluate(tiny_task, kernel_source=SEGFAULT, quick=True)
    assert report.status == "CRASH"
    assert "SIGSEGV" in report.reason or "SIGBUS" in report.reason
    assert harness.restarts == restarts + 1
    again = harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)
    assert again.status == "PASS", again.reason


def test_infinite_loop_times_out(strict_harness, tiny_task):
    strict_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)  # warm: baselines taken
    report = strict_harness.evaluate(tiny_task, kernel_source=HANG, quick=True)
    assert report.status == "TIMEOUT" and "10 s" in report.reason
    assert 9.5 <= report.wall_s < 30
    again = strict_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)
    assert again.status == "PASS", again.reason


def test_memory_blowup_is_killed(lean_harness, tiny_task):
    report = lean_harness.evaluate(tiny_task, kernel_source=MEMORY_HOG, quick=True)
    assert report.status == "CRASH" and "memory blowup" in report.reason
    again = lean_harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)
    assert again.status == "PASS", again.reason


def test_candidate_prints_do_not_break_the_protocol_and_are_kept(harness, tiny_task):
    src = GOOD.replace("def kernel_fn(x, weight, eps):\n", "def kernel_fn(x, weight, eps):\n    print('hello' * 1000)\n")
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "PASS", report.reason
    assert "hellohello" in report.stderr_tail


def test_worker_imports_only_torch_triton_stdlib_and_harness_modules():
    import subprocess
    import sys
    code = (
        "import os, sys; os.environ['TRITON_INTERPRET'] = '1'\n"
        "before = set(sys.modules)\n"
        "import autokernel_tui.harness.worker.judge, autokernel_tui.harness.worker.stages\n"
        "import autokernel_tui.harness.worker.contestant, autokernel_tui.harness.worker.ceilings\n"
        "mods = {m.split('.')[0] for m in sys.modules}\n"
        "ours = sorted(m for m in sys.modules if m.startswith('autokernel_tui.'))\n"
        "print(' '.join(sorted(mods & {'textual', 'git', 'anthropic', 'openai', 'rich'})))\n"
        "print(' '.join(ours))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    forbidden, ours = out.splitlines()[0], out.splitlines()[1].split()
    assert forbidden == ""
    allowed_prefixes = ("autokernel_tui.harness", "autokernel_tui.tasks", "autokernel_tui.errors",
                        "autokernel_tui.redaction")
    assert all(m.startswith(allowed_prefixes) for m in ours), ours
    assert "autokernel_tui.harness.runner" not in ours


def test_runner_side_never_imports_torch():
    import subprocess
    import sys
    code = ("import sys\nimport autokernel_tui.harness.runner, autokernel_tui.harness.report, "
            "autokernel_tui.commands.bench, autokernel_tui.harness.roofline, autokernel_tui.harness.stats\n"
            "print('torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


def _harness_processes(marker: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(pid)
    return out


@pytest.mark.parametrize("sandbox", ["auto", "landlock"])  # with bwrap where it works; without it too
def test_kill_9_of_the_engine_takes_every_harness_process_with_it(tiny_task, tmp_path, sandbox):
    # Issue 18: after kill -9 of the engine during a hanging candidate, the worker spun for minutes.
    import signal
    import subprocess
    import sys
    import time
    # The candidate also leaves a setsid-ed child (no parent-death signal of its own) that names this test.
    mark = f"9{os.getpid()}.4243"
    hang = HANG.replace("def kernel_fn", "import typing\n"
                        "typing.sys.modules['builtins'].exec(\"import os\\nif os.fork() == 0:\\n    os.setsid()\\n"
                        f"    os.execv('/bin/sleep', ['sleep', '{mark}'])\", {{}})\n\n\ndef kernel_fn", 1)
    script = tmp_path / "engine.py"
    script.write_text(f'''
from autokernel_tui.harness.runner import Harness
HANG = {hang!r}
h = Harness(timeout_s=600, device="cpu", sandbox={sandbox!r})
print("SCRATCH", h._tmp, flush=True)
h.evaluate({str(tiny_task)!r}, kernel_source=HANG, quick=True)
''')
    engine = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    line = engine.stdout.readline()
    assert line.startswith("SCRATCH"), line
    scratch = line.split()[1]
    deadline = time.time() + 120
    while time.time() < deadline and not any("contestant" in d for d in os.listdir(scratch + "/scratch")):
        time.sleep(0.5)  # the hanging candidate has its contestant now
    time.sleep(2)
    assert _harness_processes(scratch), "the judge should be running"
    assert _harness_processes(mark), "the candidate's child should be running"
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait()
    deadline = time.time() + 15
    while time.time() < deadline and (_harness_processes(scratch) or _harness_processes(mark)):
        time.sleep(0.25)
    assert _harness_processes(scratch) == [], "harness processes outlived the engine"
    assert _harness_processes(mark) == [], "the candidate's setsid-ed child outlived the engine"
    # The next harness clears the dead one's scratch folder.
    from autokernel_tui.harness.runner import clean_stale_scratch
    assert scratch in clean_stale_scratch() and not os.path.exists(scratch)
