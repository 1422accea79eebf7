"""The GEMM template's kernels compile for the H200 (sm_90) without register spills, on tensor cores,
and (channels innermost) with vectorised async copies: checked here without a GPU
(tests/kernels/template_compile.py: ptxas ships with triton). The CPU tests run them only under the
interpreter, which accepts code the GPU compiler rejects."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("template-sm90") / "rows.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(HERE / "template_compile.py"), str(out)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert out.exists(), proc.stderr[-3000:]
    return {f"{r['where']}/{r['kernel']}": r for r in json.loads(out.read_text())}


def test_every_template_kernel_compiles_without_spills_on_tensor_cores(rows):
    # gemm, fused gemm, 4 convolutions, the few-channel one, a depthwise one plain, transposed and fused,
    # two weight gradients split over K with their sums (bfloat16's two sums one compile), the GEMV's two
    # kernels, pooling: x 2 dtypes; the attention at ViT-B's head (x 2 dtypes) and with a T5-style mask
    # and for bfloat16 the GEMM and fused GEMM again through TMA descriptors
    assert len(rows) == 38, sorted(rows)
    assert {r["kernel"] for r in rows.values()} == {"_gemm_kernel", "_gemm_kernel_e0", "_conv_kernel", "_conv_kernel_e0",
                                                    "_conv_split_sum", "_gemv_kernel", "_gemv_sum_kernel",
                                                    "_avg_pool_kernel", "_attention_kernel"}
    for where, r in rows.items():
        assert not r["error"], f"{where}: {r['error']}"
        assert r["local_bytes"] + r["stack_bytes"] == 0, f"{where}: spills {r['local_bytes'] + r['stack_bytes']} B"
        if where.startswith(("gemm/", "gemm_fused/", "conv", "attention")) and r["kernel"] != "_conv_split_sum":
            assert r["sass"].get("HGMMA"), f"{where}: no wgmma"
        if where.startswith("dwconv"):  # K per output is the kernel's 49 positions: no GEMM to give wgmma
            assert not r["sass"].get("HGMMA"), f"{where}: a depthwise convolution ran as a GEMM"


def test_aligned_16_bit_gemms_load_through_tma(rows):
    for where in ("gemm_tma/bfloat16/_gemm_kernel", "gemm_tma_fused/bfloat16/_gemm_kernel_e0"):
        sass = rows[where]["sass"]
        assert any(k.startswith("UTMALDG") for k in sass) and sass.get("HGMMA"), f"{where}: {sass}"
    assert not any(k.startswith("UTMALDG") for k in rows["gemm/bfloat16/_gemm_kernel"]["sass"])


def test_the_fused_epilogue_reads_its_operand_with_vector_loads(rows):
    for dtype in ("bfloat16", "float32"):
        fused = rows[f"gemm_fused/{dtype}/_gemm_kernel_e0"]["sass"]
        assert fused.get("LDG.128") and not rows[f"gemm/{dtype}/_gemm_kernel"]["sass"].get("LDG.128"), fused


def test_channels_innermost_turns_the_convolutions_loads_into_16_byte_async_copies(rows):
    conv = lambda where: rows[f"{where}/_conv_kernel"]  # noqa: E731
    nchw, last = conv("conv64_cl0/bfloat16")["sass"], conv("conv64_cl1/bfloat16")["sass"]
    assert nchw.get("LDG.U16") and not any(k.startswith("LDGSTS") for k in nchw), nchw  # 2 bytes at a time
    assert last.get("LDGSTS.128") and not last.get("LDG.U16"), last
    assert conv("conv64_cl1/bfloat16")["regs"] < conv("conv64_cl0/bfloat16")["regs"]
    assert conv("conv64_cl1/float32")["sass"].get("LDGSTS.128")
    assert not conv("conv64_cl0/float32")["sass"].get("LDGSTS.128")
