"""A hostile user edits the run files between sessions: results.tsv cut mid-line or with rows
gone, events.jsonl lines that are valid JSON but not events, bytes that are not UTF-8, bad
numbers, a broken run.json. Each time: the real `run --headless` CLI resumes, never reuses an
experiment number or loses a commit, and says what it repaired or skipped, naming the file and
the line."""

import json
import subprocess

from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import check_consistent, engine_env, git, run_args

TAG = "t"


def run_dir(ws):
    return ws / ".autokernel" / "runs" / TAG


def run(ws, max_experiments, script="90,95,80,85/FAIL"):
    proc = subprocess.run(run_args(ws, "--policy", "auto", "--tag", TAG, "--max-experiments", str(max_experiments)),
                          env=engine_env(AUTOKERNEL_TEST_SCRIPT=script), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def refs(ws):
    out = git(ws, "for-each-ref", "--format=%(refname) %(objectname)", f"refs/autokernel/{TAG}/")
    return dict(line.split() for line in out.splitlines())


def test_results_cut_mid_line_is_restored_from_the_journal(workspace):
    git(workspace, "branch", "-M", "main")
    run(workspace, 3)  # keep, discard, keep
    before = read_rows(run_dir(workspace) / "results.tsv")
    refs_before = refs(workspace)
    path = run_dir(workspace) / "results.tsv"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][:30])  # row 1, then row 2 cut mid-line

    proc = run(workspace, 5)
    rows = check_consistent(workspace, TAG, final=True)
    assert [r["experiment"] for r in rows] == [1, 2, 3, 4, 5]
    assert [(r["commit"], r["status"]) for r in rows[:3]] == [(r["commit"], r["status"]) for r in before]
    after = refs(workspace)
    assert all(after[name] == sha for name, sha in refs_before.items())  # exp-2 was not overwritten
    assert "repaired" in proc.stderr and "line 3: an incomplete last line" in proc.stderr
    assert "restored the rows of experiments 2, 3 from their result events" in proc.stderr
    repaired = [e["message"] for e in read_events(run_dir(workspace) / "events.jsonl") if e["type"] == "repaired"]
    assert any("restored the rows of experiments 2, 3" in m for m in repaired)


def test_rows_and_journal_both_lost_are_rebuilt_from_git(workspace):
    git(workspace, "branch", "-M", "main")
    run(workspace, 4)  # 1 keep, 2 discard, 3 keep, 4 fail
    kept3 = git(workspace, "rev-parse", f"autokernel/{TAG}")
    refs_before = refs(workspace)
    # Everything after experiment 1 is gone from results.tsv AND from events.jsonl.
    path = run_dir(workspace) / "results.tsv"
    path.write_text("\n".join(path.read_text().split("\n")[:2]) + "\n")
    events_path = run_dir(workspace) / "events.jsonl"
    lines = events_path.read_text().split("\n")
    first_result = next(i for i, line in enumerate(lines) if line and json.loads(line)["type"] == "result")
    events_path.write_text("\n".join(lines[: first_result + 1]) + "\n")

    proc = run(workspace, 6)
    rows = check_consistent(workspace, TAG, final=True, journal_lost=(2, 3, 4))
    assert [r["experiment"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["status"] for r in rows[:4]] == ["keep", "discard", "keep", "fail"]
    # exp 3 is on the branch: the branch advances only on a keep, so it was kept (no decision needed).
    assert git(workspace, "rev-parse", f"refs/autokernel/{TAG}/exp-3") == kept3 == rows[2]["commit"]
    assert git(workspace, "merge-base", "--is-ancestor", kept3, f"autokernel/{TAG}", check=False) == ""
    after = refs(workspace)
    assert all(after[name] == sha for name, sha in refs_before.items())
    assert rows[1]["commit"] == refs_before[f"refs/autokernel/{TAG}/exp-2"]
    assert rows[3]["latency_us"] is None and rows[1]["latency_us"] == 95  # from reports/exp-N.json
    assert "experiment 3's commit" not in proc.stderr  # nothing was moved off the branch
    assert "rebuilt the rows of experiments 2, 3, 4 from git, reports/ (2: discard, 3: keep, 4: fail)" in proc.stderr


def test_an_old_run_with_its_candidate_on_the_branch_is_finished_and_repaired(workspace, settings):
    """Runs from before candidates lived off the branch committed each candidate on the branch and
    wrote its ref only when discarding. Opened now: an undecided tip the journal knows (the open
    experiment) is discarded, one it does not know is rebuilt from git; both end at their refs with
    the branch moved back, and numbering goes on above them."""
    from autokernel_tui.engine.loop import Engine
    from enginefakes import FakeHarness, ScriptedAgent, with_markers

    git(workspace, "branch", "-M", "main")
    run(workspace, 2)  # 1 keep, 2 discard
    wt = workspace / ".autokernel" / "worktrees" / TAG
    kernel = wt / "kernels" / "rmsnorm" / "kernel.py"
    tip_before = git(workspace, "rev-parse", f"autokernel/{TAG}")

    def old_commit(n, latency):  # as the old engine committed a candidate: on the branch, no ref
        kernel.write_text(with_markers(kernel.read_text(), latency))
        git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am",
            f"exp {n}: latency {latency}us\n\nAutokernel-Task: rmsnorm\nAutokernel-Experiment: {n}\n"
            f"Autokernel-Status: PASS\nAutokernel-Run: {TAG}")
        return git(wt, "rev-parse", "HEAD")

    lost = old_commit(3, 85)  # undecided, and no trace in the journal: rebuilt from git
    engine = Engine(workspace, settings, tag=TAG, agent=ScriptedAgent([70]), harness=FakeHarness())
    try:
        assert [(r["experiment"], r["status"]) for r in engine.results.rows][2:] == [(3, "discard")]
        assert engine.results.rows[2]["commit"] == engine.repo.ref_sha(3) == lost
        assert any("experiment 3's commit" in m for m in engine.repairs)
    finally:
        engine.close()
    assert git(workspace, "rev-parse", f"autokernel/{TAG}") == tip_before

    events = run_dir(workspace) / "events.jsonl"
    with open(events, "a") as fh:
        fh.write(json.dumps({"t": 1.0, "type": "experiment_started", "run": TAG, "n": 4, "task": "rmsnorm"}) + "\n")
    open4 = old_commit(4, 75)  # the experiment the old engine died in, its candidate on the branch tip
    engine = Engine(workspace, settings, tag=TAG, agent=ScriptedAgent([70]), harness=FakeHarness())
    try:
        row = engine.results.rows[3]
        assert (row["experiment"], row["status"], row["commit"]) == (4, "crash", open4)
        assert row["description"].startswith("interrupted")
        assert engine.repo.ref_sha(4) == open4
        assert engine.record.next_n() == 5
    finally:
        engine.close()
    assert git(workspace, "rev-parse", f"autokernel/{TAG}") == tip_before
    assert git(wt, "status", "--porcelain") == ""
    check_consistent(workspace, TAG, final=True, journal_lost=(3,))


def test_a_deleted_row_in_the_middle_comes_back_in_order(workspace):
    git(workspace, "branch", "-M", "main")
    run(workspace, 3)
    path = run_dir(workspace) / "results.tsv"
    lines = path.read_text().split("\n")
    path.write_text("\n".join(lines[:2] + lines[3:]))  # row 2 removed by hand
    run(workspace, 4)
    rows = check_consistent(workspace, TAG, final=True)
    assert [r["experiment"] for r in rows] == [1, 2, 3, 4]


def test_hostile_events_lines_are_skipped_with_a_warning_and_the_run_resumes(workspace):
    git(workspace, "branch", "-M", "main")
    run(workspace, 2)
    events_path = run_dir(workspace) / "events.jsonl"
    n_before = len(events_path.read_bytes().split(b"\n")) - 1
    bad = [b"[1, 2, 3]", b"42", b'"text"', b"null", b'{"no": "type"}',
           b'{"type": "experiment_started", "t": 1, "n": "seven", "task": "rmsnorm"}',
           b'{"type": "result", "t": 1, "row": [1, 2]}',
           b'{"type": "result", "t": 1, "row": {"experiment": -4, "status": "keep"}}',
           b'{"type": "decision", "t": 1, "n": 2, "action": ["keep"]}',
           b'{"type": "verdict", "t": "noon", "n": 2}',
           b'{"type": "state", "t": 1, "state": "running", "note": "caf\xe9 \xff"}',
           b"[" * 100000 + b"]" * 100000,
           b"{not json"]
    with open(events_path, "ab") as fh:
        fh.write(b"\n".join(bad) + b"\n")

    proc = run(workspace, 4)
    rows = check_consistent(workspace, TAG, final=True)
    assert [r["experiment"] for r in rows] == [1, 2, 3, 4]
    warned = [line for line in proc.stderr.splitlines() if "events.jsonl line" in line]
    # one line per bad line, each naming the file and its line number (the non-UTF-8 one is read,
    # with the bytes replaced, and said so)
    assert len(warned) == len(bad), proc.stderr
    for i, line in enumerate(warned):
        assert f"events.jsonl line {n_before + 1 + i}:" in line
    assert "a JSON list, not an event object" in warned[0]
    assert '"n" is \'seven\', not a whole number' in warned[5]
    assert "not UTF-8" in warned[10]
    assert "nested too deeply" in warned[11]

    # The review side (and `status`) read the same files without a traceback.
    status = subprocess.run(["autokernel-tui", "status", "-C", str(workspace)], capture_output=True, text=True,
                            env=engine_env())
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    from autokernel_tui.ledger.history import load_runs

    problems = []
    (hist,) = load_runs(workspace, problems=problems)
    assert len(hist.events()) > 10 and len(problems) == len(bad)


def test_bad_numbers_in_results_are_read_as_empty_and_the_file_rewritten(workspace):
    git(workspace, "branch", "-M", "main")
    run(workspace, 4)
    path = run_dir(workspace) / "results.tsv"
    header, *rows = path.read_bytes().rstrip(b"\n").split(b"\n")
    cells = [r.split(b"\t") for r in rows]
    cells[0][6] = b"abc"        # latency_us
    cells[0][16] = b"-5"        # tokens: a negative count
    cells[1][7] = b"nan"        # speedup_vs_baseline
    cells[1][8] = b"inf"        # speedup_vs_incumbent
    cells[2][18] = b"caf\xe9"   # description: not UTF-8
    cells[3][4] = b"maybe"      # status: not one of ours -> the row is unusable
    path.write_bytes(b"\n".join([header] + [b"\t".join(c) for c in cells]) + b"\n" + b"just\tthree\tcolumns\n")

    problems = []
    typed = read_rows(path, typed=True, problems=problems)
    assert [r["experiment"] for r in typed] == [1, 2, 3]
    assert typed[0]["latency_us"] is None and typed[0]["tokens"] is None
    assert typed[1]["speedup_vs_baseline"] is None and typed[1]["speedup_vs_incumbent"] is None
    assert typed[2]["description"] == "caf\ufffd"
    assert all(f"{path} line " in p for p in problems) and len(problems) == 7, problems
    assert any("line 2: latency_us is 'abc', not a number; read as empty" in p for p in problems)
    assert any("line 5: status 'maybe'" in p for p in problems)

    proc = run(workspace, 6)
    assert "results.tsv line 2: latency_us is 'abc', not a number" in proc.stderr
    assert "results.tsv line 2: tokens is '-5', but must be at least 0; read as empty" in proc.stderr
    assert "the old file is kept as results.tsv.bad-1" in proc.stderr
    assert (run_dir(workspace) / "results.tsv.bad-1").read_bytes().count(b"caf\xe9") == 1
    rows = check_consistent(workspace, TAG, final=True)
    assert [r["experiment"] for r in rows] == [1, 2, 3, 4, 5, 6]  # row 4 rebuilt from its result event
    assert rows[3]["status"] == "fail" and rows[0]["latency_us"] is None
    again = []
    read_rows(path, problems=again)
    assert again == []  # the rewritten file reads clean


def test_a_broken_run_json_is_one_line_naming_the_file(workspace):
    run(workspace, 1)
    meta = run_dir(workspace) / "run.json"
    for text, expect in ((b"[1, 2]", "a JSON list, not an object"), (b'{"tag": "t"', "line 1: not JSON"),
                         (b"\xff\xfe", "not UTF-8"), (b'{"tag": "t", "base": 5, "tasks": []}', '"base"'),
                         (b'{"tag": "t", "base": "deadbeef", "tasks": ["rmsnorm"], "owned_hashes": {}}',
                          "is not a commit of this repository"),
                         (b'{"tag": "t", "base": "HEAD", "tasks": "rmsnorm", "owned_hashes": {}}', '"tasks"')):
        meta.write_bytes(text)
        proc = subprocess.run(run_args(workspace, "--tag", TAG), env=engine_env(), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(meta) in lines[0] and expect in lines[0], proc.stderr


def test_the_app_is_told_what_was_repaired(workspace, settings):
    """In process (the app's case): the repairs are in the snapshot, and the live screen's state
    turns them into warnings."""
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.tui.live_state import LiveState
    from enginefakes import FakeHarness, ScriptedAgent

    run(workspace, 2)
    path = run_dir(workspace) / "results.tsv"
    path.write_bytes(path.read_bytes()[:-20])  # the last row cut
    engine = Engine(workspace, settings, tag=TAG, agent=ScriptedAgent([90]), harness=FakeHarness())
    try:
        snap = engine.snapshot()
    finally:
        engine.close()
    assert any("restored the rows of experiments 2" in m for m in snap["repairs"])
    notices = LiveState.from_snapshot(snap).repair_notices()
    assert notices and all(n.severity == "warning" for n in notices)
    assert any("results.tsv line 3: an incomplete last line" in n.message for n in notices)
