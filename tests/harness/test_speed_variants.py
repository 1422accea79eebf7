"""harness_speed.py's planted changes: kernel.py sources the harness accepts, and the spin that makes a
clean 3% change compiles for Hopper (sm_90, through the ptxas shipped with triton; no GPU needed)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel_tui.harness.static_check import check_source

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("harness_speed_under_test", REPO / "benchmarks" / "harness_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("task", ["rmsnorm", "softmax"])
@pytest.mark.parametrize("how", ["copy", "spin"])
def test_planted_variants_pass_the_static_check(task, how):
    bench = _bench()
    source = (REPO / "kernels" / task / "kernel.py").read_text()
    plan = bench.SpinPlan({(((8, 64), "torch.float16"),): 12.5}, 1980.0)
    variant = bench.slower_variant(source, 0.033, how, plan)
    assert check_source(variant) == []
    assert "def _starter_kernel_fn(" in variant and variant.count("def kernel_fn(") == 1
    if how == "spin":  # the measured figures are baked in: kernel.py times nothing itself
        assert "_STARTER_US = {(((8, 64), 'torch.float16'),): 12.5}" in variant
        assert "_CYCLES_PER_US = 1980.0" in variant and "Event" not in variant


COMPILE_SPIN = r"""
import json, sys
import importlib.util
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile as triton_compile
spec = importlib.util.spec_from_file_location("variant", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["variant"] = module
spec.loader.exec_module(module)
k = triton_compile(ASTSource(fn=module._spin, signature={"OUT": "*i64", "cycles": "i64"}, constexprs={}),
                   target=GPUTarget("cuda", 90, 32))
print(json.dumps({"ptx": k.asm["ptx"], "cubin": len(k.asm["cubin"])}))
"""


def test_spin_kernel_compiles_for_sm90_as_a_clock_loop(tmp_path):
    bench = _bench()
    source = (REPO / "kernels" / "rmsnorm" / "kernel.py").read_text()
    path = tmp_path / "kernel.py"
    path.write_text(bench.slower_variant(source, 0.033, "spin", bench.SpinPlan({}, 1980.0)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE_SPIN, str(path)], capture_output=True, text=True,
                          env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    ptx = got["ptx"]
    assert ptx.count("%clock64") >= 2 and "bra" in ptx and got["cubin"] > 0


@pytest.mark.gpu
def test_spin_plan_measures_every_shape_in_a_child_process():
    from autokernel_tui.tasks.spec import load_spec, starters_dir

    bench = _bench()
    task = starters_dir() / "rmsnorm"
    plan = bench.spin_plan(task, quick=True)
    shapes = load_spec(task).shapes_for("cuda")
    assert len(plan.starter_us) == len(shapes) and all(us > 0 for us in plan.starter_us.values())
    assert 300 < plan.cycles_per_us < 4000  # an SM clock, in cycles per microsecond
