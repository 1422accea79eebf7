"""Compile the GEMM template's kernels (profiling/gemm_template.py) for Hopper (sm_90) without a GPU.

The template's kernels run only under the interpreter in the CPU tests; this compiles what a
generated task launches (plain and fused-epilogue GEMMs, through pointers and TMA, convolutions read in NCHW and channels
innermost, a few-channel convolution, a depthwise one, a matrix-vector product, average pooling, the
attention) through ptxas, as ``hopper_compile.py`` does for the starters, and prints a JSON list of rows (registers, spills, the interesting SASS).

    python tests/kernels/template_compile.py OUT.json
Must run WITHOUT TRITON_INTERPRET (it is unset here).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from autokernel_tui.harness.worker.loading import load_text  # noqa: E402
from autokernel_tui.profiling import attention_template as at  # noqa: E402
from autokernel_tui.profiling import gemm_template as gt  # noqa: E402
from hopper_compile import OfflineLauncher  # noqa: E402

GELU_ADD = ("v = 0.5 * v * (1.0 + _erf(v * 0.7071067811865476))", "v = v + e0")
RELU_ADD = ("v = tl.maximum(v, 0.0)", "v = v + e0")


def template_module():
    """The template's helpers and kernels, with one fused GEMM and one fused convolution, from a file
    (``triton.jit`` reads each kernel's source from its file)."""
    source = ("import torch\nimport triton\nimport triton.language as tl\n" + gt.MATH + gt.TILE + gt.GEMM + gt.CONV
              + gt.POOL + at.SOURCE
              + "\n\n" + gt.render_kernel(gt.GEMM_KERNEL, "_gemm_kernel", "_gemm_kernel_e0", 1, GELU_ADD)
              + "\n\n" + gt.render_kernel(gt.CONV_KERNEL, "_conv_kernel", "_conv_kernel_e0", 1, RELU_ADD) + "\n")
    return load_text(source, "template_kernels")


def compile_template() -> list[dict]:
    m = template_module()
    launcher = OfflineLauncher()
    original = JITFunction.run
    JITFunction.run = lambda self, *a, grid, warmup, **k: launcher.run(self, *a, grid=grid, warmup=warmup, **k)
    try:
        for dtype in (torch.bfloat16, torch.float32):
            name = str(dtype).replace("torch.", "")
            a, b, bias = torch.randn(512, 256, dtype=dtype), torch.randn(256, 384, dtype=dtype), torch.randn(384, dtype=dtype)
            launcher.context = f"gemm/{name}"
            m._gemm(a, b, bias)
            launcher.context = f"gemm_fused/{name}"
            m._gemm(a, b, bias, kernel=m._gemm_kernel_e0, epilogue=((torch.randn(512, 384, dtype=dtype), (512, 384)),))
            if dtype != torch.float32:  # 16-bit rows on 16-byte boundaries, on a Hopper: TMA (a Linear's weight)
                m._HOPPER[a.device] = True
                weight = torch.randn(384, 256, dtype=dtype)
                launcher.context = f"gemm_tma/{name}"
                m._gemm(a, weight.t(), bias)
                launcher.context = f"gemm_tma_fused/{name}"
                m._gemm(a, weight.t(), bias, kernel=m._gemm_kernel_e0,
                        epilogue=((torch.randn(512, 384, dtype=dtype), (512, 384)),))
                m._HOPPER.clear()
            x, w = torch.randn(2, 64, 32, 32, dtype=dtype), torch.randn(128, 64, 3, 3, dtype=dtype)
            for channels_last in (0, 1):
                m.CONV_CHANNELS_LAST = channels_last
                launcher.context = f"conv64_cl{channels_last}/{name}"
                m._conv(x, w, torch.randn(128, dtype=dtype), (1, 1), (1, 1), (1, 1))
                launcher.context = f"conv64_cl{channels_last}_fused/{name}"
                m._conv(x, w, None, (1, 1), (1, 1), (1, 1), kernel=m._conv_kernel_e0,
                        epilogue=((torch.randn(128, 1, 1, dtype=dtype), (2, 128, 32, 32)),))
            launcher.context = f"conv3/{name}"  # an image's first layer: K = 27
            m._conv(torch.randn(2, 3, 32, 32, dtype=dtype), torch.randn(16, 3, 3, 3, dtype=dtype), None,
                    (1, 1), (1, 1), (1, 1))
            launcher.context = f"dwconv7/{name}"  # depthwise 7x7 (ConvNeXt's): elementwise, no GEMM
            m._conv(torch.randn(2, 96, 28, 28, dtype=dtype), torch.randn(96, 1, 7, 7, dtype=dtype),
                    torch.randn(96, dtype=dtype), (1, 1), (3, 3), (1, 1), groups=96)
            launcher.context = f"dwconv7_transposed/{name}"  # its input gradient: transposed, elementwise too
            m._conv(torch.randn(2, 96, 28, 28, dtype=dtype), torch.randn(96, 1, 7, 7, dtype=dtype), None,
                    (1, 1), (3, 3), (1, 1), True, (0, 0), 96)
            launcher.context = f"dwconv7_fused/{name}"  # and a chain's pointwise ops in its epilogue
            m._conv(torch.randn(2, 96, 28, 28, dtype=dtype), torch.randn(96, 1, 7, 7, dtype=dtype), None,
                    (1, 1), (3, 3), (1, 1), groups=96, kernel=m._conv_kernel_e0,
                    epilogue=((torch.randn(96, 1, 1, dtype=dtype), (2, 96, 28, 28)),))
            m.CONV_SPLIT_PROGRAMS_PER_SM = 64  # (the CPU counts 2 SMs) a weight gradient's K split, as on a GPU
            launcher.context = f"conv_wgrad_by_position/{name}"  # batch 32 as channels, 28x28 "kernel" positions
            m._conv(torch.randn(64, 32, 28, 28, dtype=dtype), torch.randn(64, 32, 28, 28, dtype=dtype), None,
                    (1, 1), (1, 1), (1, 1))
            launcher.context = f"conv_wgrad_flat/{name}"  # batch 4: K over (batch, position) together
            m._conv(torch.randn(3, 4, 58, 58, dtype=dtype), torch.randn(16, 4, 56, 56, dtype=dtype), None,
                    (1, 1), (0, 0), (1, 1))
            m.CONV_SPLIT_PROGRAMS_PER_SM = 2
            launcher.context = f"gemv/{name}"  # a matrix-vector product: split-K partial sums, then their sum
            m._gemm(torch.randn(300, 700, dtype=dtype), torch.randn(700, 1, dtype=dtype), torch.randn(1, dtype=dtype))
            launcher.context = f"avg_pool3d/{name}"  # KernelBench level 1 problem 46's window
            m._avg_pool(torch.randn(2, 3, 9, 8, 7, dtype=dtype), 3, 3, (2, 2, 2), (1, 1, 1))
            q = torch.randn(2, 197, 12, 64, dtype=dtype).transpose(1, 2)  # ViT-B's: strided, an odd length
            launcher.context = f"attention_d64/{name}"
            m._attention(q, q, q, None, False, None)
            if dtype != torch.float32:  # (fp32's three-product dots spill at D = 128 with a mask: 152 B)
                launcher.context = f"attention_d128_mask/{name}"  # a T5-style additive bias, broadcast over the batch
                q = torch.randn(2, 8, 100, 128, dtype=dtype)
                m._attention(q, q, q, torch.randn(1, 8, 100, 100, dtype=dtype), False, None)
    finally:
        JITFunction.run = original
    return list(launcher.seen.values())


if __name__ == "__main__":
    rows = compile_template()
    Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(f"{r['where']:<26}{r['kernel']:<18}regs {r['regs']:>3} spill {r['local_bytes'] + r['stack_bytes']:>4}B "
              f"{r['error'] or r['sass']}")
