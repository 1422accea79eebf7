"""Which layer of the contestant's confinement, if any, keeps CUDA from working on this machine.

Each probe is a fresh Python process that applies one layer the way the contestant does
(``harness/worker/contestant.py``: Landlock with the same roots, the file-size limit) and then asks
torch for the GPU; then the harness itself evaluates the rmsnorm starter (quick) under each
``harness.sandbox`` setting. GPU only:

    PYTHONPATH=$PWD python3 benchmarks/sandbox_gpu_probe.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

CUDA_CHECK = ("import torch; n = torch.cuda.device_count(); x = torch.ones(4, device='cuda'); "
              "print('device_count', n, 'sum', float(x.sum()))")
LAYERS = {
    "nothing": "",
    "fsize limit": "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))",
    "landlock fs (read /, write scratch + /dev)":
        "from autokernel_tui.harness.sandbox import landlock; landlock.restrict(['/'], [{scratch!r}, '/dev'])",
    "landlock, torch imported first":
        "import torch; from autokernel_tui.harness.sandbox import landlock; "
        "landlock.restrict(['/'], [{scratch!r}, '/dev'])",
    "landlock, CUDA initialised first":
        "import torch; torch.cuda.init(); from autokernel_tui.harness.sandbox import landlock; "
        "landlock.restrict(['/'], [{scratch!r}, '/dev'])",
}


def probe_layers() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, setup in LAYERS.items():
            code = (setup.format(scratch=scratch) + "\n" if setup else "") + CUDA_CHECK
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                 env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": scratch})
            tail = (res.stdout + res.stderr).strip().splitlines()
            out[name] = {"rc": res.returncode, "last": tail[-1][:200] if tail else ""}
            print(f"{name:<45} rc={res.returncode}  {out[name]['last']}", flush=True)
    return out


def probe_harness() -> dict:
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.tasks.spec import starters_dir

    out = {}
    for sandbox in ("off", "landlock", "bwrap"):
        try:
            with Harness(device="cuda", sandbox=sandbox, timeout_s=300) as h:
                r = h.evaluate(starters_dir() / "rmsnorm", quick=True)
            out[sandbox] = {"status": r.status, "reason": r.reason[:200], "stderr": (r.stderr_tail or "")[-600:]}
        except Exception as exc:  # a setting that cannot start is a finding
            out[sandbox] = {"status": "ERROR", "reason": f"{type(exc).__name__}: {exc}"[:300], "stderr": ""}
        print(f"harness.sandbox={sandbox:<9} {out[sandbox]['status']}  {out[sandbox]['reason']}", flush=True)
        if out[sandbox]["status"] != "PASS" and out[sandbox]["stderr"]:
            print("    " + out[sandbox]["stderr"].replace("\n", "\n    "), flush=True)
    return out


if __name__ == "__main__":
    result = {"layers": probe_layers(), "harness": probe_harness()}
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(result, indent=1))
