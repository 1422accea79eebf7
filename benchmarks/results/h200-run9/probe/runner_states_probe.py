import subprocess, sys, os, time
CODE = '''
{setup}
from autokernel_tui.harness import runner
runner.driver_touched_here = lambda: None  # the refusal off: does the count fix alone suffice?
from autokernel_tui.harness.runner import Harness
from autokernel_tui.tasks.spec import starters_dir
try:
    with Harness(device="cuda", timeout_s=300) as h:
        for i in range(2):
            r = h.evaluate(starters_dir() / "rmsnorm", quick=True)
            print("EVAL", i, r.status, r.reason[:120], flush=True)
            if r.status != "PASS":
                lines = [l for l in (r.stderr_tail or "").splitlines() if "CUDA started" in l or "Error" in l]
                print("WHY", lines[-1][:700] if lines else (r.stderr_tail or "")[-300:])
except RuntimeError as exc:
    print("REFUSED", str(exc)[:200])
'''
NVML = "import os; os.environ['PYTORCH_NVML_BASED_CUDA_CHECK']='1'\nimport torch\nprint('avail', torch.cuda.is_available())\ndel os.environ['PYTORCH_NVML_BASED_CUDA_CHECK']"
SETUPS = {
    "NVML started here (refusal off)": NVML,
    "cuInit here (refusal off)": "import torch; print('avail', torch.cuda.is_available())",
}
SIBLINGS = {
    "a sibling holds NVML": "import ctypes, time; l = ctypes.CDLL('libnvidia-ml.so.1'); print(l.nvmlInit_v2(), flush=True); time.sleep(120)",
    "a sibling holds a CUDA context": "import torch, time; x = torch.ones(1, device='cuda'); print(float(x), flush=True); time.sleep(120)",
}
def run(name, setup):
    t = time.time()
    r = subprocess.run([sys.executable, "-c", CODE.format(setup=setup)], capture_output=True, text=True, timeout=300)
    out = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith(("EVAL", "WHY", "REFUSED", "avail", "shutdown"))]
    print(f"=== {name}: rc={r.returncode} {time.time()-t:.0f}s"); print("\n".join(out), flush=True)
for name, setup in SETUPS.items():
    run(name, setup)
