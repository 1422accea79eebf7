import os, json
from pathlib import Path
from autokernel_tui.harness.runner import Harness
from autokernel_tui.harness.sandbox import environment
from autokernel_tui.tasks.spec import starters_dir

def test_diag():
    tag = os.environ.get("DIAG_TAG", "x")
    out = Path(os.environ["OUT"]) / f"diag_{tag}.txt"
    lines = ["env: " + json.dumps(environment.clean(os.environ), sort_keys=True)]
    maps = open("/proc/self/maps").read()
    lines.append("mapped: " + ",".join(sorted({l.split("/")[-1] for l in maps.splitlines() if "nvidia" in l or "cuda" in l})))
    import signal
    lines.append("sigmask: " + str(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    lines.append("ignored: " + str([s.name for s in signal.Signals if signal.getsignal(s) == signal.SIG_IGN]))
    with Harness(device="cuda", timeout_s=300) as h:
        r = h.evaluate(starters_dir() / "rmsnorm", quick=True)
        lines.append(f"STATUS {r.status} {r.reason}")
        lines.append(r.stderr_tail or "")
    out.write_text("\n".join(lines))
    print("\n".join(lines[:5]))
