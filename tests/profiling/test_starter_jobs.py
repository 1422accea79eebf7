"""init makes the generated tasks' starters several at once (``starter_process.make_all``): each is a
compile in a process of its own, and a profile's twenty of them one after another were minutes of
silence."""

import threading
import time
from pathlib import Path

from autokernel_tui.profiling import starter_process as sp


def test_starters_are_made_together_up_to_the_limit_and_every_one_ends():
    running, most, lock = [0], [0], threading.Lock()

    def job():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.5)
        with lock:
            running[0] -= 1

    heard = []
    t0 = time.monotonic()
    failed = sp.make_all([(Path(f"t{i}"), job) for i in range(6)], lambda stage, done, total: heard.append(
        (done, total)), at_once=3)
    wall = time.monotonic() - t0
    assert failed == [] and most[0] == 3 and wall < 6 * 0.5 * 0.75  # together, never more than three
    assert heard[0] == (0, 6) and heard[-1] == (6, 6) and [d for d, _ in heard] == list(range(7))


def test_a_job_that_raises_is_that_tasks_failure_in_the_order_given():
    def ok():
        pass

    def bad(msg):
        def job():
            raise ValueError(msg)
        return job

    jobs = [(Path("a"), bad("first")), (Path("b"), ok), (Path("c"), bad("second"))]
    failed = sp.make_all(jobs, at_once=2)
    assert [(d.name, str(e)) for d, e in failed] == [("a", "first"), ("c", "second")]
    assert sp.make_all([]) == []


def test_how_many_at_once_comes_from_the_environment_or_the_cores(monkeypatch):
    monkeypatch.setenv(sp.JOBS_ENV, "7")
    assert sp.jobs_at_once() == 7
    for bad in ("0", "many", ""):
        monkeypatch.setenv(sp.JOBS_ENV, bad)
        assert 1 <= sp.jobs_at_once() <= sp.MAX_JOBS


def test_ctrl_c_starts_no_new_starter_and_kills_the_running_ones():
    import sys

    import pytest

    started = []

    def child():
        started.append(1)
        sp._run([sys.executable, "-c", "import time; time.sleep(60)"], 120)

    def interrupt(stage, done, total):
        if done:  # the quick job ended: the user presses Ctrl-C
            raise KeyboardInterrupt

    jobs = [(Path("quick"), lambda: time.sleep(0.5))] + [(Path(f"slow{i}"), child) for i in range(3)]
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sp.make_all(jobs, interrupt, at_once=2)
    assert time.monotonic() - t0 < 20  # not the children's 60 s: each one running was killed
    # the last queued one never started (a second may have been taken as the quick one ended)
    assert len(started) <= 2 and not sp._children


def test_the_starter_processes_share_the_cores_for_inductors_compile_workers(monkeypatch):
    import os
    import sys

    seen = []

    def child():
        out = sp._run([sys.executable, "-c", f"import os; print(os.environ.get({sp.COMPILE_THREADS_ENV!r}))"], 60)
        seen.append(out.stdout.strip())

    monkeypatch.delenv(sp.COMPILE_THREADS_ENV, raising=False)
    sp.make_all([(Path(f"t{i}"), child) for i in range(2)], at_once=2)
    assert seen == [str(max(1, (os.cpu_count() or 1) // 2))] * 2
    monkeypatch.setenv(sp.COMPILE_THREADS_ENV, "3")  # the user's choice stands
    seen.clear()
    sp.make_all([(Path(f"t{i}"), child) for i in range(2)], at_once=2)
    assert seen == ["3", "3"] and not sp._child_env
