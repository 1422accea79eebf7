"""The morning report of runs the real engine wrote (engine.loop.Engine, its git ledger, results.tsv,
events.jsonl, reports/), with fast doubles for the harness and agent: the GPU-like night of
tests/fakes/gpu_run.py (H200 numbers, one kernel) and a two-kernel run with profile shares."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autokernel_tui.cli import main as cli_main
from autokernel_tui.ledger.results import read_rows
from autokernel_tui.report.data import collect, verify_path
from autokernel_tui.report.render import html, kernel_rows, markdown
from tests.fakes import gpu_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from enginefakes import FakeHarness, ScriptedAgent  # noqa: E402


def _git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


def _set_share(ws: Path, task: str, share: float) -> None:
    """What `init --from-profile` writes into task.toml [profile], committed before the run starts."""
    toml = ws / "kernels" / task / "task.toml"
    toml.write_text(toml.read_text() + f'\n[profile]\nmodel = "llama"\ndevice = "NVIDIA H200"\ntime_kind = "cuda"\n'
                    f'share = {share}\nbatch = 1\nseq = 4096\ndtype = "bfloat16"\n')
    _git(ws, "commit", "-qam", f"profile share of {task}")


@pytest.fixture(scope="module")
def gpu_like(tmp_path_factory):
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path_factory.mktemp("gpu") / "ws", tasks=["rmsnorm"])
    _set_share(ws, "rmsnorm", 0.3)
    engine = gpu_run.start_run(ws)
    gpu_run.stop_run(engine)
    return ws


@pytest.fixture(scope="module")
def two_kernels(tmp_path_factory):
    return _two_kernel_run(tmp_path_factory.mktemp("two"))


def _two_kernel_run(root: Path) -> Path:
    """rmsnorm (share 0.4) and softmax (share 0.2) under the auto policy; a kernel plateaus after one
    experiment without a keep. Latencies (us, 100 = the baseline and the start): 80 kept, 90 not,
    then the other kernel: 50 kept, 70 not."""
    from autokernel_tui.config import Settings
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(root / "ws", tasks=["rmsnorm", "softmax"])
    _set_share(ws, "rmsnorm", 0.4)
    _set_share(ws, "softmax", 0.2)
    s = Settings()
    s.run.policy = "auto"
    s.run.max_experiments = 4
    s.run.plateau_experiments = 1
    engine = Engine(ws, s, tag="two", new=True, agent=ScriptedAgent([80, 90, 50, 70]), harness=FakeHarness())
    engine.start()
    deadline = time.time() + 60
    while engine.state not in ("stopped",) and time.time() < deadline:
        time.sleep(0.05)
    engine.join(30)
    engine.close()
    return ws


class _Points(HTMLParser):
    def __init__(self):
        super().__init__()
        self.points: list[dict] = []
        self.kept_sections: list[dict] = []
        self.tags: set[str] = set()
        self.srcs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if "class" in a and a["class"].startswith("pt ") and "data-exp" in a:
            self.points.append(a)
        if tag == "section" and a.get("class") == "kept":
            self.kept_sections.append(a)
        for key in ("src", "href"):
            if key in a:
                self.srcs.append(a[key])


def _parse(text: str) -> _Points:
    p = _Points()
    p.feed(text)
    return p


def test_gpu_like_night_report(gpu_like):
    rows = read_rows(gpu_like / ".autokernel" / "runs" / gpu_run.TAG / "results.tsv", typed=True)
    assert [r["status"] for r in rows] == ["keep", "discard", "fail", "keep", "discard"]
    r = collect(gpu_like)
    (k,) = r.kernels
    assert k.task == "rmsnorm" and [e.n for e in k.keeps] == [1, 4]
    # Best confirmed = exp 4's harness summary; the start = the starter's report (50.08 / 16.81 us).
    assert k.now_vs_baseline == pytest.approx(0.9022)
    start = math.sqrt((16.3 / 50.08) * (25.0 / 16.81))
    assert k.start_vs_baseline == pytest.approx(start, rel=2e-3)
    assert k.vs_start == pytest.approx(1.1128 * 1.1653)
    assert (k.vs_start_low, k.vs_start_high) == (pytest.approx(1.0994 * 1.1513), pytest.approx(1.1262 * 1.1793))
    (row,) = kernel_rows(r)
    assert row["now"] == "0.902x" and row["vs_start"] == "1.297x" and row["ci"] == "[1.266, 1.328]"
    assert row["share"] == "30.0%" and row["best_exp"] == "exp 4" and row["roofline"] == "38.3%"
    assert row["worst"] == "gpt2-small 0.527x"
    # Slower than the op the model calls: not shipped, so the model gains nothing.
    assert row["e2e"] == "1.000x" and r.prediction.speedup == pytest.approx(1.0)

    page = html(r)
    parsed = _parse(page)
    assert sorted(int(p["data-exp"]) for p in parsed.points) == [1, 2, 3, 4, 5]  # one point per experiment
    assert [p["data-exp"] for p in parsed.points if "kept" in p["class"]] == ["1", "4"]
    assert next(p for p in parsed.points if p["data-exp"] == "3")["data-speedup"] == ""  # the FAIL: no timing
    assert next(p for p in parsed.points if p["data-exp"] == "4")["data-speedup"] == "0.9022"
    assert [s["data-exp"] for s in parsed.kept_sections] == ["1", "4"]
    # The kept diffs, coloured by pygments: exp 4 changed ROW_BLOCK_ELEMS 2048 -> 4096 on top of exp 1.
    section4 = page[page.index('<section class="kept" data-exp="4"'):]
    section4 = section4[:section4.index("</section>")]
    assert re.search(r'<span class="gd">-ROW_BLOCK_ELEMS = 2048', section4)
    assert re.search(r'<span class="gi">\+ROW_BLOCK_ELEMS = 4096', section4)
    assert "NUM_WARPS 8 -&gt; 16" not in section4  # a discarded experiment has no kept section
    # Self-contained: no script, nothing loaded from anywhere.
    assert "script" not in parsed.tags and parsed.srcs == []
    assert "Content-Security-Policy" in page and "NVIDIA H200" in page


def test_two_kernel_report_and_amdahl(two_kernels, tmp_path):
    rows = read_rows(two_kernels / ".autokernel" / "runs" / "two" / "results.tsv", typed=True)
    assert [(r["task"], r["status"]) for r in rows] == [("rmsnorm", "keep"), ("rmsnorm", "discard"),
                                                         ("softmax", "keep"), ("softmax", "discard")]
    r = collect(two_kernels, "two")
    by = {row["kernel"]: row for row in kernel_rows(r)}
    assert by["rmsnorm"]["now"] == "1.250x" and by["softmax"]["now"] == "2.000x"
    assert by["rmsnorm"]["vs_start"] == "1.250x" and by["rmsnorm"]["ci"] == "[1.225, 1.275]"
    assert by["softmax"]["ci"] == "[1.960, 2.040]"
    assert by["rmsnorm"]["share"] == "40.0%" and by["softmax"]["share"] == "20.0%"
    # Amdahl: 1 / ((1 - 0.6) + 0.4 / 1.25 + 0.2 / 2)
    assert r.prediction.speedup == pytest.approx(1 / 0.82)
    assert by["rmsnorm"]["e2e"] == f"{1 / (0.6 + 0.4 / 1.25):.3f}x"

    parsed = _parse(html(r))
    assert sorted(int(p["data-exp"]) for p in parsed.points) == [1, 2, 3, 4]
    assert {p["data-task"] for p in parsed.points} == {"rmsnorm", "softmax"}
    assert [s["data-exp"] for s in parsed.kept_sections] == ["1", "3"]

    # A saved verify result is picked up from the run's folder; --verify FILE names another.
    verify = {"model": "llama", "device": "NVIDIA H200", "dtype": "bfloat16", "batch": 1, "seq": 4096,
              "mode": "forward", "correct": True, "rel_l2_vs_original": 1e-3, "tolerance": 2e-2,
              "before": {"median_us": 1000.0, "n": 30}, "after": {"median_us": 830.0, "n": 30},
              "measured_speedup": 1000 / 830, "predicted_speedup": 1.21, "timing_meaningful": True,
              "timing_method": "CUDA events, interleaved, median", "families": []}
    import json

    verify_path(two_kernels, "two").write_text(json.dumps(verify))
    md = markdown(collect(two_kernels, "two"))
    assert "measured 1.205x, predicted 1.210x" in md and "Outputs: PASS" in md
    other = tmp_path / "v.json"
    other.write_text(json.dumps({**verify, "correct": False}))
    assert "Outputs: FAIL" in markdown(collect(two_kernels, "two", other))

    # The command: HTML to the run's folder by default; Markdown with -o FILE.md.
    assert cli_main(["report", str(two_kernels), "--run", "two"]) == 0
    assert (two_kernels / ".autokernel" / "runs" / "two" / "report.html").read_text().startswith("<!DOCTYPE html>")
    out = tmp_path / "r.md"
    assert cli_main(["report", "-C", str(two_kernels), "--run", "two", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Run two") and "```diff" in text and "| rmsnorm | 40.0% |" in text
    assert cli_main(["report", str(two_kernels), "--run", "nope"]) == 2


def test_agent_text_is_escaped(two_kernels):
    """A description or hypothesis the agent wrote cannot put markup into the page."""
    r = collect(two_kernels, "two")
    r.experiments[0].record.description = '<script>alert(1)</script>'
    r.experiments[0].hypothesis = '<img src="http://evil">'
    page = html(r)
    assert "<script>" not in page and '<img src="http://evil">' not in page
    assert "&lt;script&gt;" in page


def test_verify_of_a_runs_kept_kernels_is_saved_for_the_report(two_kernels, capsys):
    """`verify WS` on a run's kept kernels (the real verify, llama-tiny on the CPU) saves its result
    in the run's folder, and the report shows it."""
    saved = verify_path(two_kernels, "two")
    saved.unlink(missing_ok=True)
    rc = cli_main(["verify", str(two_kernels), "--run", "two", "--model", "llama-tiny", "--device", "cpu",
                   "--dtype", "float32", "--iters", "1", "--tasks", "rmsnorm"])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert f"saved for `autokernel-tui report`: {saved}" in out.out
    assert "verify llama-tiny: timing the model without and with the kernels" in out.err  # progress, not silence
    r = collect(two_kernels, "two")
    assert r.verify["model"] == "llama" or r.verify["model"].startswith("llama")
    assert r.verify_source == str(saved)
    md = markdown(r)
    assert "Outputs: PASS" in md and f"From {saved}" in md


def test_a_reverted_keep_leaves_the_chain(tmp_path):
    """Reverting softmax's keep (review's `u`, the engine's offline revert) takes it out of the best
    confirmed numbers and the prediction; the report says so."""
    from autokernel_tui.config import Settings
    from autokernel_tui.engine.client import LocalClient

    ws = _two_kernel_run(tmp_path)
    client = LocalClient(ws, Settings(), start=False, serve=False, tag="two")
    try:
        assert client.send("revert", n=3, run="two")["ok"]
    finally:
        client.close()
    r = collect(ws, "two")
    soft = next(k for k in r.kernels if k.task == "softmax")
    assert soft.keeps == [] and soft.vs_start == 1.0 and soft.now_vs_baseline == pytest.approx(1.0)
    assert next(e for e in r.experiments if e.n == 3).reverted_by == 5
    assert r.prediction.speedup == pytest.approx(1 / ((1 - 0.6) + 0.4 / 1.25 + 0.2 / 1.0))
    page = html(r)
    assert "keep (reverted by exp 5)" in page
    assert next(row for row in kernel_rows(r) if row["kernel"] == "softmax")["now"] == "1.000x"  # the start
    assert [s["data-exp"] for s in _parse(page).kept_sections] == ["1"]
