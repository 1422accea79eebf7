"""The loop in-process with a scripted agent and the fake harness: policies, gate,
commands, budgets, outages, revert, disk full, and what lands in git and the journal."""

import errno
import json
import os
import subprocess
import threading
import time

import pytest

from autokernel_tui.engine.client import LocalClient
from autokernel_tui.engine.loop import Engine
from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import durable
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.history import load_runs
from autokernel_tui.ledger.results import read_rows
from enginefakes import FakeHarness, ScriptedAgent, latency_of, with_markers


def git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


def run_dir(ws, tag="t"):
    return ws / ".autokernel" / "runs" / tag


def statuses(ws, tag="t"):
    return [r["status"] for r in read_rows(run_dir(ws, tag) / "results.tsv")]


def wait_for(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_auto_policy_keeps_faster_and_resets_the_rest(workspace, settings):
    settings.run.max_experiments = 4
    agent = ScriptedAgent([90, 95, (50, "FAIL"), 80])
    engine = Engine(workspace, settings, tag="t", agent=agent, harness=FakeHarness())
    seen = []
    engine.subscribe(seen.append)
    assert engine.run() == "experiment budget reached (4)"
    engine.close()

    assert statuses(workspace) == ["keep", "discard", "fail", "keep"]
    rows = read_rows(run_dir(workspace) / "results.tsv", typed=True)
    assert git(workspace, "log", "--format=%s", "autokernel/t").splitlines()[:2] == ["exp 4: latency 80us",
                                                                                      "exp 1: latency 90us"]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-2").strip() == rows[1]["commit"]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-3").strip() == rows[2]["commit"]
    assert rows[3]["speedup_vs_incumbent"] == pytest.approx(90 / 80, rel=1e-4)
    assert "Autokernel-Speedup: 1.1250" in git(workspace, "log", "-1", "--format=%B", "autokernel/t")
    # The agent saw the history, each experiment with its source and the harness's reason.
    last_ctx = agent.contexts[-1]
    assert [h["status"] for h in last_ctx.history] == ["keep", "discard", "fail"]
    assert latency_of(last_ctx.history[1]["source"]) == 95 and last_ctx.history[2]["reason"] == "fake fail"
    # byte-exact sources (the tuner compares them): what was committed, final newline included
    assert last_ctx.history[1]["source"] == with_markers(agent.contexts[1].incumbent_source, 95)
    assert latency_of(last_ctx.incumbent_source) == 90
    # Events on disk are what subscribers saw, in the contract's order per experiment.
    events = read_events(run_dir(workspace) / "events.jsonl")
    assert [e["type"] for e in events] == [e["type"] for e in seen]
    exp2 = [e["type"] for e in events if e.get("n") == 2 or e.get("row", {}).get("experiment") == 2]
    assert exp2 == ["experiment_started", "agent", "agent", "proposal", "verdict", "committed", "decision", "result"]
    assert events[-1]["type"] == "run_finished"
    # The review side reads it all back.
    (run,) = load_runs(workspace)
    assert [e.status for e in run.experiments] == ["keep", "discard", "fail", "keep"]
    assert run.experiments[1].ref == "refs/autokernel/t/exp-2"
    assert "+# fake-latency-us: 95" in run.diff(2)
    assert run.report(2)["status"] == "PASS"
    assert "try latency 95" in run.reasoning(2)
    assert json.loads((run_dir(workspace) / "run.json").read_text())["finished"] is True


def test_manual_gate_human_approves_and_vetoes_and_timeout_discards(workspace, settings):
    settings.run.policy = "manual"
    settings.run.max_experiments = 4
    settings.run.approval_timeout_s = 1.5  # room for a loaded machine; exp 4 waits it out
    agent = ScriptedAgent([90, 80, 95, 70])
    client = LocalClient(Engine(workspace, settings, tag="t", agent=agent, harness=FakeHarness()), start=False)
    answers = {1: "approve", 2: "veto"}  # 3 is slower (no question), 4 times out

    def on_event(ev):
        if ev["type"] == "awaiting_approval" and ev["n"] in answers:
            threading.Thread(target=lambda: client.send(answers[ev["n"]], n=ev["n"])).start()

    client.subscribe(on_event)
    assert client.send("approve")["ok"] is False  # nothing pending yet
    client.engine.run()
    client.close()
    client.engine.close()
    assert statuses(workspace) == ["keep", "vetoed", "discard", "discard"]
    decisions = [(e["n"], e["action"], e["by"]) for e in read_events(run_dir(workspace) / "events.jsonl")
                 if e["type"] == "decision"]
    assert decisions == [(1, "keep", "human"), (2, "veto", "human"), (3, "discard", "policy"),
                         (4, "discard", "timeout")]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-2").strip()


def test_the_branch_holds_kept_experiments_only_while_one_awaits_approval(workspace, settings):
    """A candidate awaiting approval lives at its ref, off the branch: the branch tip is the last kept
    experiment (what `verify`, `git log` or a merge would take), the worktree holds the candidate for
    the harness; approve advances the branch to it, veto leaves the branch where it was."""
    settings.run.policy = "manual"
    settings.run.max_experiments = 3
    settings.run.approval_timeout_s = 60
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80, 70]), harness=FakeHarness())
    base = git(workspace, "rev-parse", "HEAD").strip()
    worktree_kernel = workspace / ".autokernel/worktrees/t/kernels/rmsnorm/kernel.py"
    answers = {1: "approve", 2: "veto", 3: "approve"}
    seen = {}

    def on_event(ev):
        if ev["type"] == "awaiting_approval":  # the engine waits for us: look at git now
            n = ev["n"]
            seen[n] = {"tip": git(workspace, "rev-parse", "autokernel/t").strip(),
                       "ref": git(workspace, "rev-parse", f"refs/autokernel/t/exp-{n}").strip(),
                       "pending": engine.snapshot()["pending"]["n"],
                       "worktree": latency_of(worktree_kernel.read_text())}
            threading.Thread(target=lambda: engine.command(answers[n], n=n)).start()

    engine.subscribe(on_event)
    engine.run()
    engine.close()
    rows = read_rows(run_dir(workspace) / "results.tsv", typed=True)
    assert [r["status"] for r in rows] == ["keep", "vetoed", "keep"]
    exp1, exp2, exp3 = (r["commit"] for r in rows)
    assert seen[1] == {"tip": base, "ref": exp1, "pending": 1, "worktree": 90}
    assert seen[2] == {"tip": exp1, "ref": exp2, "pending": 2, "worktree": 80}  # exp 1 approved: advanced
    assert seen[3] == {"tip": exp1, "ref": exp3, "pending": 3, "worktree": 70}  # exp 2 vetoed: not on it
    assert git(workspace, "rev-parse", "autokernel/t").strip() == exp3  # exp 3 approved: advanced
    assert git(workspace, "rev-list", "--first-parent", f"{base}..autokernel/t").split() == [exp3, exp1]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-2").strip() == exp2  # the vetoed one is kept
    assert latency_of(worktree_kernel.read_text()) == 70
    assert git(workspace / ".autokernel/worktrees/t", "status", "--porcelain") == ""


def test_threshold_policy_and_set_policy_while_waiting(workspace, settings):
    settings.run.policy = "threshold"
    settings.run.threshold = 1.2
    settings.run.max_experiments = 2
    settings.run.approval_timeout_s = 30
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([50, 45]), harness=FakeHarness())

    def on_event(ev):  # exp 2 is 1.11x: below the threshold, so it asks; switching to auto answers it
        if ev["type"] == "awaiting_approval":
            threading.Thread(target=lambda: engine.command("set_policy", policy="auto")).start()

    engine.subscribe(on_event)
    engine.run()
    engine.close()
    decisions = [(e["action"], e["by"]) for e in read_events(run_dir(workspace) / "events.jsonl")
                 if e["type"] == "decision"]
    assert decisions == [("keep", "policy"), ("keep", "policy")]
    assert engine.command("set_policy", policy="yolo")["ok"] is False


def test_agent_outage_pauses_without_losing_anything(workspace, settings):
    settings.run.max_experiments = 2
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, "down"]), harness=FakeHarness())
    engine.start()
    wait_for(lambda: engine.state == "paused")
    errors = [e["message"] for e in read_events(run_dir(workspace) / "events.jsonl") if e["type"] == "error"]
    assert errors and "agent unavailable: scripted outage" in errors[0]
    assert statuses(workspace) == ["keep"]
    engine._agent.script = [90, 85]  # the service is back
    assert engine.command("resume")["ok"]
    engine.join(10)
    engine.close()
    assert statuses(workspace) == ["keep", "keep"]
    # unattended: the engine retries by itself after run.agent_retry_s
    settings.run.max_experiments = 3
    settings.run.agent_retry_s = 0.3
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80, "down"]), harness=FakeHarness())
    engine.start()
    wait_for(lambda: engine.state == "paused")
    engine._agent.script = [80]
    engine.join(10)
    engine.close()
    assert statuses(workspace) == ["keep", "keep", "keep"]
    assert [r["experiment"] for r in read_rows(run_dir(workspace) / "results.tsv", typed=True)] == [1, 2, 3]


def test_pause_skip_stop_and_second_engine_refused(workspace, settings):
    settings.run.max_experiments = 50
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([95], delay_s=0.05), harness=FakeHarness())
    with pytest.raises(WorkspaceError, match="another engine"):
        Engine(workspace, settings, tag="t2", agent=ScriptedAgent([90]), harness=FakeHarness())
    engine.command("pause")
    engine.start()
    wait_for(lambda: engine.state == "paused")
    time.sleep(0.2)
    assert statuses(workspace) == []
    engine.command("resume")
    wait_for(lambda: len(statuses(workspace)) >= 2)
    assert engine.command("skip")["ok"]
    engine.command("stop")
    engine.join(10)
    assert engine.state == "stopped"
    n = len(statuses(workspace))
    engine.close()
    kinds = [e["type"] for e in read_events(run_dir(workspace) / "events.jsonl")]
    assert kinds[-1] == "session_ended" and "run_finished" not in kinds  # a stop can be resumed
    # the same command resumes the same run
    again = Engine(workspace, settings, agent=ScriptedAgent([90]), harness=FakeHarness())
    assert again.tag == "t" and again.resumed
    again.command("stop")
    again.run()
    again.close()
    assert len(statuses(workspace)) == n


def test_budget_in_dollars_and_revert(workspace, settings):
    settings.run.max_cost_usd = 0.025  # each proposal costs 0.01
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80, 85]), harness=FakeHarness())
    assert engine.run().startswith("cost budget reached")
    assert statuses(workspace) == ["keep", "keep", "discard"]
    kept2 = read_rows(run_dir(workspace) / "results.tsv", typed=True)[1]["commit"]
    assert engine.command("revert", n=3)["ok"] is False  # not kept
    assert engine.command("revert", n=2)["ok"] is True
    assert engine.command("revert", n=2)["ok"] is False  # once
    engine.close()
    rows = read_rows(run_dir(workspace) / "results.tsv", typed=True)
    assert rows[-1]["status"] == "reverted" and rows[-1]["experiment"] == 4
    assert rows[-1]["description"].startswith("revert exp 2:")
    head_src = (workspace / ".autokernel/worktrees/t/kernels/rmsnorm/kernel.py").read_text()
    exp1_src = subprocess.run(["git", "-C", str(workspace), "show", "autokernel/t~2:kernels/rmsnorm/kernel.py"],
                              capture_output=True, text=True).stdout
    assert head_src == exp1_src and latency_of(head_src) == 90  # exactly exp 1's kernel again
    assert git(workspace, "rev-parse", "autokernel/t~1").strip() == kept2


def test_a_revert_is_known_by_its_trailer_not_its_description(workspace, settings):
    """Which experiment a revert undid is its commit's Autokernel-Reverts trailer: a description
    edited by hand changes nothing (a second revert is refused, the kernel's speedup stays taken
    back out); a revert whose commit cannot be read is still read by its description."""
    settings.run.max_experiments = 2
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80]), harness=FakeHarness())
    engine.run()
    assert engine.command("revert", n=2)["ok"] is True
    assert engine.orch.tasks["rmsnorm"].speedup == pytest.approx(100 / 90, rel=1e-4)
    engine.close()
    path = run_dir(workspace) / "results.tsv"
    path.write_text(path.read_text().replace("revert exp 2: latency 80us", "undo the 80 us kernel"))
    assert "Autokernel-Reverts: " + read_rows(path, typed=True)[1]["commit"] in \
        git(workspace, "log", "-1", "--format=%B", "autokernel/t")

    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90]), harness=FakeHarness())
    try:
        assert engine.results.rows[2]["description"] == "undo the 80 us kernel"
        refused = engine.command("revert", n=2)
        assert refused["ok"] is False and "already reverted" in refused["error"]
        assert engine.orch.tasks["rmsnorm"].speedup == pytest.approx(100 / 90, rel=1e-4)  # replayed the same
        old = {"experiment": 9, "commit": "", "status": "reverted", "description": "revert exp 1: latency 90us"}
        assert engine.reverts.target(old) == 1
    finally:
        engine.close()


def test_disk_full_pauses_and_resume_records_the_experiment_once(workspace, settings, monkeypatch):
    settings.run.max_experiments = 3
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80, 70]), harness=FakeHarness())
    real = durable.append_line
    state = {"full": False}

    def append(path, line):
        if '"type":"committed","run":"t","n":2' in line:
            state["full"] = True  # the disk fills up mid-experiment, right after this line
        elif state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, line)

    monkeypatch.setattr("autokernel_tui.ledger.results.append_line", append)
    monkeypatch.setattr("autokernel_tui.ledger.events.append_line", append)
    engine.start()
    wait_for(lambda: engine.state == "paused")
    assert statuses(workspace) == ["keep"]
    state["full"] = False
    engine.command("resume")
    engine.join(10)
    engine.close()
    rows = read_rows(run_dir(workspace) / "results.tsv", typed=True)
    assert [(r["experiment"], r["status"]) for r in rows] == [(1, "keep"), (2, "discard"), (3, "keep")]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-2").strip() == rows[1]["commit"]
    results = [e["row"]["experiment"] for e in read_events(run_dir(workspace) / "events.jsonl")
               if e["type"] == "result"]
    assert results == [1, 2, 3]


def test_unknown_task_and_dirty_workspace(workspace, settings):
    with pytest.raises(WorkspaceError, match="unknown task"):
        Engine(workspace, settings, tag="x", tasks=["softmax"], agent=ScriptedAgent([1]), harness=FakeHarness())


def test_wall_time_budget_counts_earlier_sessions(workspace, settings):
    settings.run.max_wall_s = 0.4
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([95], delay_s=0.1), harness=FakeHarness())
    assert engine.run().startswith("wall-time budget reached")
    engine.close()
    n = len(statuses(workspace))
    assert n >= 1
    meta = json.loads((run_dir(workspace) / "run.json").read_text())
    meta["finished"] = False  # pretend it was killed instead: the next session has no time left
    (run_dir(workspace) / "run.json").write_text(json.dumps(meta))
    again = Engine(workspace, settings, agent=ScriptedAgent([95]), harness=FakeHarness())
    assert again.tag == "t" and again.run().startswith("wall-time budget reached")
    again.close()
    assert len(statuses(workspace)) == n


def test_review_reverts_a_finished_run_without_running_it(workspace, settings):
    settings.run.max_experiments = 2
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80]), harness=FakeHarness())
    engine.run()
    engine.close()
    # What review does: open that run idle (no loop, no agent, no harness), revert, close.
    client = LocalClient(workspace, settings, start=False, serve=False, tag="t")
    assert client.snapshot()["state"] == "idle"
    assert client.send("revert", n=2, run="other")["ok"] is False
    assert client.send("revert", n=2, run="t")["ok"] is True
    client.close()
    assert statuses(workspace) == ["keep", "keep", "reverted"]
    assert latency_of(git(workspace, "show", "autokernel/t:kernels/rmsnorm/kernel.py")) == 90


def test_a_stop_while_recovery_keeps_failing_ends_the_session(workspace, settings, monkeypatch):
    # Seen in the demo: closing the tmux session (SIGHUP) killed GitPython's cat-file helper,
    # every recovery attempt raised EPIPE, and a stopped engine spun writing error events.
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90]), harness=FakeHarness())
    calls = {"n": 0}

    def broken_recover():
        calls["n"] += 1
        raise OSError(errno.EPIPE, "Broken pipe")

    engine._needs_recovery = True
    monkeypatch.setattr(engine, "_recover", broken_recover)
    engine.start()
    wait_for(lambda: engine.state == "paused")
    engine.command("stop")
    engine.join(10)
    assert engine.finish_reason == "stopped by request"
    assert calls["n"] == 1
    errors = [e for e in read_events(run_dir(workspace) / "events.jsonl") if e["type"] == "error"]
    assert len(errors) == 1 and "Broken pipe" in errors[0]["message"]
    engine.close()


@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "the disk is full"), (errno.EDQUOT, "the disk quota is exceeded"),
    (errno.EPIPE, "a helper process the engine talks to (e.g. git) has died"), (errno.EACCES, "permission denied"),
    (errno.EROFS, "the file system is read-only"), (errno.EIO, "an input/output error"),
])
def test_an_os_error_says_what_it_is(code, says):
    from autokernel_tui.errors import describe_os_error

    text = describe_os_error(OSError(code, os.strerror(code), "/ws/.autokernel/runs/t/results.tsv"))
    assert text.startswith(says) and f"[Errno {code}]" in text and "results.tsv" in text
    # only a full disk or quota asks for space
    assert ("free space" in text) == (code in (errno.ENOSPC, errno.EDQUOT))


def test_a_git_helper_killed_mid_experiment_is_named_and_nothing_is_lost(workspace, settings, monkeypatch):
    # Issue 25: the terminal's Ctrl-C killed GitPython's cat-file helpers, the next object read failed
    # with EPIPE, and the engine said "free space". The helpers now run in their own session, and an
    # experiment no longer reads objects through them (each git step is a process of its own): one
    # killed any other way costs nothing. A git step that still dies with EPIPE is named for what it
    # is, and resuming records the experiment once.
    settings.run.max_experiments = 3
    engine = Engine(workspace, settings, tag="t", agent=ScriptedAgent([90, 80, 70]), harness=None)

    class KillsGitHelpers(FakeHarness):
        def evaluate(self, *args, **kwargs):
            if len(self.calls) == 1:  # experiment 1's evaluation (the first call measured the baseline)
                engine.repo.tip()  # make sure the persistent helpers are running, then kill them
                for repo in (engine.repo.repo, engine.repo.wt):
                    for helper in (repo.git.cat_file_header, repo.git.cat_file_all):
                        if helper is not None:
                            helper.proc.kill()
                            helper.proc.wait()
            return super().evaluate(*args, **kwargs)

    engine._harness = KillsGitHelpers()
    amend = engine.repo.amend_candidate

    def dies_once(n, *args):
        if n == 2:
            monkeypatch.setattr(engine.repo, "amend_candidate", amend)
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return amend(n, *args)

    monkeypatch.setattr(engine.repo, "amend_candidate", dies_once)
    engine.start()
    wait_for(lambda: engine.state == "paused")
    errors = [e["message"] for e in read_events(run_dir(workspace) / "events.jsonl") if e["type"] == "error"]
    assert len(errors) == 1 and "free space" not in errors[0], errors
    assert "has died ([Errno 32] Broken pipe)" in errors[0] and errors[0].startswith("experiment 2 "), errors
    assert statuses(workspace) == ["keep"]  # experiment 1 finished although its git helpers were killed
    engine.command("resume")
    engine.join(10)
    engine.close()
    rows = read_rows(run_dir(workspace) / "results.tsv", typed=True)
    assert [(r["experiment"], r["status"]) for r in rows] == [(1, "keep"), (2, "discard"), (3, "keep")]
    assert git(workspace, "rev-parse", "refs/autokernel/t/exp-2").strip() == rows[1]["commit"]
    results = [e["row"]["experiment"] for e in read_events(run_dir(workspace) / "events.jsonl")
               if e["type"] == "result"]
    assert results == [1, 2, 3]
