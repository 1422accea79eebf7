"""Issue 19: faithful capture, generated tasks, never a silent skip, KernelBench files (CPU, small shapes)."""

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel_tui.profiling.amdahl import rank
from autokernel_tui.profiling.capture import profile_bundle
from autokernel_tui.profiling.replay import record_forward
from autokernel_tui.profiling.zoo import ModelBundle
from autokernel_tui.tasks import spec as taskspec
from autokernel_tui.profiling.extract import SKIPPED_FILE, extract_all
from benchmarks import starters_check as sc


def _profile(name, model, inputs):
    torch.manual_seed(0)
    bundle = ModelBundle(name, model.eval(), tuple(inputs), False, "float32", "cpu", 0, 0)
    return rank(profile_bundle(bundle, steps=1, warmup=0))


def _extract(profile, tmp_path, top=20):
    created, skipped = extract_all(profile, tmp_path / "kernels", top=top, threshold=0.0)
    return {p.name: p for p in created}, skipped


def _generated(created, family):
    return [p for p in created.values() if p.name.startswith("gen_") and taskspec.load_spec(p).family == family]


def _baseline_passes(task_dir):
    """The eager replay meets the task's own tolerance against float64 (what test_starters asks)."""
    spec = taskspec.load_spec(task_dir)
    ref = sc.load_reference(task_dir, f"anyop-{task_dir.name}")
    for dtype in spec.dtypes:
        inputs = ref.make_inputs(dict(spec.test_shapes[0].dims), getattr(torch, dtype), "cpu", 0)
        eager = ref.reference(*inputs)
        row = sc.compare(eager, eager, sc.precise_reference(ref, inputs), spec.tolerances[dtype], inputs)
        assert row["passed"], f"{task_dir.name} {dtype}: {row['why']}"
        assert ref.flops({}) > 0 and ref.bytes_moved({}, getattr(torch, dtype)) > 0
        for fn in ref.ADVERSARIAL.values():
            fn(inputs, torch.Generator().manual_seed(0))
    return ref


def test_multi_dim_layernorm_is_rows_of_the_product(tmp_path):
    # (64, 256, 256) normalised over (256, 256) in the issue; scaled down: 4 rows of 16*16.
    prof = _profile("ln2d", nn.LayerNorm((16, 16)), [torch.randn(4, 16, 16)])
    created, _ = _extract(prof, tmp_path)
    spec = taskspec.load_spec(created["layernorm"])
    assert [s.dims for s in spec.shapes] == [{"M": 4, "N": 256}]
    rec = prof["replay"]
    ln = next(o for o in rec["ops"] if o["op"] == "aten.native_layer_norm.default")
    assert ln["args"][1] == [16, 16] and ln["args"][4] == pytest.approx(1e-5)


def test_group_norm_is_not_layernorm_and_becomes_a_generated_task(tmp_path):
    model = nn.GroupNorm(16, 32)
    with torch.no_grad():
        model.weight.uniform_(0.5, 1.5)
        model.bias.normal_()
    x = torch.randn(2, 32, 5, 3)
    prof = _profile("gn", model, [x])
    fams = {f["family"] for f in prof["families"]}
    assert "group_norm" in fams and "layernorm" not in fams
    created, _ = _extract(prof, tmp_path)
    assert "layernorm" not in created
    (task,) = _generated(created, "group_norm")
    ref = _baseline_passes(task)
    gn = next(o for o in ref.UNIT["ops"])
    assert gn["op"] == "aten.native_group_norm.default" and gn["args"][3:7] == [2, 32, 15, 16]
    # The reference replays the model's op: same output on the model's own tensors.
    torch.testing.assert_close(ref.reference(x, model.weight.detach(), model.bias.detach()), model(x).detach())
    assert "aten::native_group_norm" in taskspec.load_spec(task).forbidden_ops


class Gemm(nn.Module):
    """KernelBench level 2's Gemm_Multiply_LeakyReLU: a Linear with its bias, then an epilogue."""

    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(24, 40)

    def forward(self, x):
        return F.leaky_relu(self.gemm(x) * 2.0, 0.1)


def test_gemm_multiply_leakyrelu_keeps_bias_and_epilogue(tmp_path):
    model, x = Gemm(), torch.randn(6, 24)
    prof = _profile("gemm", model, [x])
    created, _ = _extract(prof, tmp_path)
    assert "matmul" not in created  # the bias-less starter would drop the bias
    (task,) = _generated(created, "matmul")
    ref = _baseline_passes(task)
    assert [o["op"] for o in ref.UNIT["ops"]] == ["aten.addmm.default", "aten.mul.Tensor",
                                                   "aten.leaky_relu.default"]
    # inputs in first-use order: addmm(bias, x, w.t())
    out = ref.reference(model.gemm.bias.detach(), x, model.gemm.weight.detach().t())
    torch.testing.assert_close(out, model(x).detach())
    spec = taskspec.load_spec(task)
    assert {"aten::addmm", "aten::mul", "aten::leaky_relu"} <= set(spec.forbidden_ops) and spec.bound == "compute"


def test_a_generated_matmul_chain_starts_from_the_gemm_template_and_passes_the_harness(tmp_path):
    """Issue 19: Inductor leaves mm/addmm to cuBLAS, so a Linear's chain had no starter; the GEMM template
    writes one (a tl.dot GEMM with the bias and the pointwise ops in its epilogue) that passes the real
    harness, with its tile sizes and the fusion as the tuner's knobs."""
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.harness.static_check import check_source

    created, _ = _extract(_profile("gemm", Gemm(), [torch.randn(6, 24)]), tmp_path)
    (task,) = _generated(created, "matmul")
    source = (task / "kernel.py").read_text()
    assert "NO STARTER" not in source and "_gemm(" in source and check_source(source) == []
    spec = taskspec.load_spec(task)
    # float32: the fp32 tile's knobs (the 16-bit tile is never read for these inputs), GROUP_M, and
    # whether the multiply and the LeakyReLU run in the GEMM's epilogue
    assert set(spec.knob_space) == {"FP32_BLOCK_M", "FP32_BLOCK_N", "FP32_BLOCK_K", "FP32_NUM_WARPS",
                                    "FP32_NUM_STAGES", "GROUP_M", "FUSE_EPILOGUE"}
    assert "kernel=_gemm_kernel_e0" in source and "tl.where(v > 0, v, v * 0.1)" in source
    assert "gemm_template" in (task / "task.toml").read_text() and "gemm_template" in (task / "README.md").read_text()
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


def test_the_gemm_templates_16_bit_tile_visits_grouped_tiles_correctly(tmp_path):
    """The 16-bit path (Hopper-sized tile, tiles visited in groups of GROUP_M rows) on ragged sizes:
    3 x 2 tiles of 128, a group taller than the grid, a K that is not a multiple of the tile."""
    import importlib.util

    created, _ = _extract(_profile("gemm", Gemm(), [torch.randn(6, 24)]), tmp_path)
    (task,) = _generated(created, "matmul")
    spec_ = importlib.util.spec_from_file_location("gemm_kernel_16", task / "kernel.py")
    kernel = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(kernel)
    g = torch.Generator().manual_seed(0)
    for group in (8, 1, 2):
        kernel.GROUP_M = group
        a = torch.randn(300, 70, generator=g).to(torch.float16)
        b = torch.randn(70, 200, generator=g).to(torch.float16)
        bias = torch.randn(200, generator=g).to(torch.float16)
        out = kernel._gemm(a, b, bias)
        want = torch.addmm(bias.float(), a.float(), b.float())
        torch.testing.assert_close(out.float(), want, atol=0.08, rtol=0.02)


def test_a_generated_conv_chain_starts_from_the_implicit_gemm_and_passes_the_harness(tmp_path):
    # Issue 19: conv + epilogue (KernelBench level 2's staple) as an implicit GEMM, strided and padded.
    from autokernel_tui.harness.runner import Harness

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, dilation=1)

        def forward(self, x):
            return F.relu(self.conv(x)) + 0.5

    created, _ = _extract(_profile("convnet", Net(), [torch.randn(2, 3, 9, 7)]), tmp_path)
    (task,) = _generated(created, "conv")
    assert "_conv(" in (task / "kernel.py").read_text()
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


def test_batched_matmuls_get_the_template_too(tmp_path):
    from autokernel_tui.harness.runner import Harness

    class Net(nn.Module):
        def forward(self, q, k, bias):
            return torch.baddbmm(bias, q, k.transpose(1, 2)).relu() + torch.bmm(q, k.transpose(1, 2))

    created, _ = _extract(_profile("bmm", Net(), [torch.randn(3, 5, 16), torch.randn(3, 7, 16),
                                                  torch.randn(3, 5, 7)]), tmp_path)
    tasks = _generated(created, "matmul")
    assert tasks and all("_bmm(" in (t / "kernel.py").read_text() for t in tasks), [t.name for t in tasks]
    with Harness(timeout_s=300, device="cpu") as h:
        for task in tasks:
            report = h.evaluate(task, quick=True)
            assert report.status == "PASS", (task.name, report.reason)


def test_the_gemm_template_names_the_op_it_cannot_write():
    from autokernel_tui.profiling.gemm_template import NoTemplate, template_source

    meta = {"shape": [4, 4], "stride": [4, 1], "dtype": "float32", "param": False}
    unit = {"ops": [{"op": "aten.mm.default", "args": [{"tensor": 1}, {"tensor": 2}], "kwargs": {}, "outputs": [3]},
                    {"op": "aten.cumsum.default", "args": [{"tensor": 3}, 0], "kwargs": {}, "outputs": [4]}],
            "inputs": [1, 2], "outputs": [4], "tensors": {str(i): meta for i in range(1, 5)}}
    with pytest.raises(NoTemplate, match="aten.cumsum.default has no template"):
        template_source(unit, "t")
    with pytest.raises(NoTemplate, match="no mm/addmm/bmm/baddbmm/convolution"):
        template_source({**unit, "ops": unit["ops"][1:]}, "t")
    mixed = {**unit, "ops": unit["ops"][:1], "outputs": [3], "tensors": {**unit["tensors"], "2": {**meta, "dtype": "bfloat16"}}}
    with pytest.raises(NoTemplate, match="mixes"):
        template_source(mixed, "t")


def test_conv_attention_embedding_get_generated_tasks(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(37, 16)
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, img, idx, mask):
            c = F.relu(self.conv(img))
            e = self.emb(idx).view(2, 5, 2, 8).transpose(1, 2)  # (B, H, S, D)
            a = F.scaled_dot_product_attention(e, e, e, attn_mask=mask)  # bidirectional, masked
            return c.sum() + a.sum()

    idx = torch.randint(3, 30, (2, 5))
    mask = torch.rand(5, 5) > 0.3
    mask[:, 0] = True
    prof = _profile("mixed", Net(), [torch.randn(2, 3, 7, 7), idx, mask])
    created, skipped = _extract(prof, tmp_path)
    for family in ("conv", "embedding", "attention_bidirectional"):
        tasks = _generated(created, family)
        assert tasks, f"no generated task for {family}: {skipped}"
        ref = _baseline_passes(tasks[0])
        if family == "embedding":
            meta = ref.UNIT["tensors"][str(ref.UNIT["inputs"][1])]
            assert (meta["min"], meta["max"]) == (int(idx.min()), int(idx.max()))
            ins = ref.make_inputs({"CALL": 1}, torch.float32, "cpu", 3)
            assert ins[1].dtype == torch.int64 and 0 <= int(ins[1].min()) and int(ins[1].max()) < 37
    conv = _generated(created, "conv")[0]
    ops = [o["op"] for o in sc.load_reference(conv, "c").UNIT["ops"]]
    assert ops == ["aten.convolution.default", "aten.relu.default"]  # conv + its epilogue, one chain
    # Never a silent skip: every ranked family has a task or a reason, also on disk.
    on_disk = json.loads((tmp_path / SKIPPED_FILE).read_text())
    assert on_disk == skipped
    with_task = {taskspec.load_spec(p).family for p in created.values()}
    for f in prof["families"]:
        assert f["family"] in with_task or any(s["family"] == f["family"] for s in skipped), f["family"]
    assert all(s["reason"] for s in skipped)


def test_record_chains_and_mask_metadata():
    q = torch.randn(1, 2, 4, 8)
    mask = torch.tensor([[True, False, True, True]] * 4)
    rec = record_forward(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), (q, mask))
    bools = [t for t in rec["tensors"] if t["dtype"] == "bool"]
    assert bools and bools[0]["values"] == mask.flatten().int().tolist()
    assert any(u["kind"] == "compute" and "attention" in u["root"] for u in rec["units"])


KB_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv, GroupNorm, scale: a tiny problem in KernelBench's format."""
    def __init__(self, in_channels, out_channels, groups, scale):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.scale = scale

    def forward(self, x):
        return self.norm(self.conv(x)) * self.scale


batch_size = 2
in_channels = 3
out_channels = 8
groups = 4
scale = 0.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, 9, 7)]


def get_init_inputs():
    return [in_channels, out_channels, groups, scale]
'''


def test_from_kernelbench_makes_a_whole_forward_task(tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    problem = tmp_path / "12_Conv2d_GroupNorm_Scale.py"
    problem.write_text(KB_PROBLEM)
    ws = init_workspace(tmp_path / "ws", from_kernelbench=[problem])
    task = ws / "kernels" / "kb_12_conv2d_groupnorm_scale"
    spec = taskspec.load_spec(task)
    assert spec.family == "kernelbench" and spec.bound == "compute"
    assert {"aten::convolution", "aten::native_group_norm", "aten::mul"} <= set(spec.forbidden_ops)
    ref = _baseline_passes(task)
    # The reference is the problem's own Model, weights from the seed, at the file's shapes.
    ns = {}
    exec(KB_PROBLEM, ns)
    torch.manual_seed(ref.WEIGHT_SEED)
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    x, *state = ref.make_inputs({"CALL": 1}, torch.float32, "cpu", 0)
    assert x.shape == (2, 3, 9, 7)
    # The Model's weights follow the file's inputs, named in STATE: a kernel gets every tensor it reads.
    assert ref.STATE == ["conv.weight", "conv.bias", "norm.weight", "norm.bias"]
    assert [tuple(t.shape) for t in state] == [(8, 3, 3, 3), (8,), (8,), (8,)]
    torch.testing.assert_close(ref.reference(x, *state), model(x).detach())
    # ... and the reference computes with the weights it is given, not its own.
    other = [t * 2 for t in state]
    torch.testing.assert_close(ref.reference(x, *other),
                               torch.func.functional_call(model, dict(zip(ref.STATE, other)), (x,)).detach())
    assert ref.flops({}) >= 2 * 2 * 8 * 7 * 5 * 27


def test_a_generated_task_starts_from_inductors_triton_and_passes_the_harness(tmp_path, monkeypatch):
    """Issue 19, item 3: the generated task's kernel.py is Inductor's own Triton for the recorded op,
    self-contained, with its blocks, warps and stages as knobs, and it passes the real harness."""
    from autokernel_tui.harness.runner import Harness

    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")
    model = nn.GroupNorm(4, 8)
    prof = _profile("gn", model, [torch.randn(2, 8, 5, 3)])
    created, _ = _extract(prof, tmp_path)
    (task,) = _generated(created, "group_norm")
    source = (task / "kernel.py").read_text()
    assert "NO STARTER" not in source, source[:600]
    assert "@triton.jit" in source and "torch._inductor" not in source
    spec = taskspec.load_spec(task)
    assert spec.knob_space and all(name.startswith("K") for name in spec.knob_space)
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


CONV_CASES = {  # x, w, bias, stride, padding, dilation, transposed, output_padding, groups
    "1d": ((2, 4, 9), (6, 4, 3), True, (2,), (1,), (1,), False, (0,), 1),
    "2d_grouped": ((2, 4, 7, 6), (6, 2, 3, 3), True, (1, 2), (1, 0), (2, 1), False, (0, 0), 2),
    "2d_depthwise": ((1, 4, 5, 5), (4, 1, 3, 3), False, (1, 1), (1, 1), (1, 1), False, (0, 0), 4),
    # depthwise (one input channel per group): elementwise over a tile of points x channels, not a GEMM
    "2d_depthwise_wide": ((2, 40, 6, 7), (40, 1, 3, 3), True, (1, 2), (2, 1), (2, 1), False, (0, 0), 40),
    "2d_depthwise_multiplier": ((1, 3, 6, 5), (6, 1, 3, 2), True, (2, 1), (1, 0), (1, 1), False, (0, 0), 3),
    "1d_depthwise": ((2, 5, 11), (5, 1, 4), True, (2,), (2,), (2,), False, (0,), 5),
    "3d_depthwise": ((1, 4, 3, 5, 4), (4, 1, 2, 3, 2), False, (1, 2, 1), (1, 1, 0), (1, 1, 2), False, (0, 0, 0), 4),
    # a depthwise convolution's input gradient: transposed, one input channel per group
    "transposed_2d_depthwise": ((2, 6, 4, 5), (6, 1, 3, 3), True, (2, 1), (1, 1), (1, 2), True, (1, 0), 6),
    "transposed_1d_depthwise_multiplier": ((1, 3, 7), (3, 2, 4), False, (3,), (2,), (1,), True, (2,), 3),
    "2d_one_channel": ((2, 1, 6, 6), (7, 1, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 1),
    "3d": ((1, 3, 4, 5, 6), (5, 3, 2, 3, 2), True, (1, 2, 1), (1, 0, 1), (1, 1, 2), False, (0, 0, 0), 1),
    "transposed_1d": ((2, 4, 5), (4, 3, 3), True, (2,), (1,), (1,), True, (1,), 1),
    "transposed_2d": ((2, 4, 5, 4), (4, 6, 3, 2), True, (2, 3), (1, 0), (1, 2), True, (1, 2), 1),
    "transposed_2d_grouped": ((1, 4, 3, 3), (4, 3, 3, 3), True, (2, 2), (0, 1), (1, 1), True, (0, 1), 2),
    "transposed_3d": ((1, 2, 3, 3, 2), (2, 3, 2, 2, 3), True, (2, 1, 2), (0, 1, 1), (1, 1, 1), True, (1, 0, 1), 1),
    # 16+ channels per group: K runs over kernel positions, then channel blocks (a ResNet's inner layers)
    "2d_wide": ((2, 40, 6, 5), (8, 40, 3, 3), True, (2, 1), (1, 1), (1, 2), False, (0, 0), 1),
    "2d_wide_grouped": ((1, 32, 5, 5), (6, 16, 3, 1), False, (1, 1), (1, 0), (1, 1), False, (0, 0), 2),
    "3d_wide": ((1, 17, 3, 4, 3), (4, 17, 2, 2, 2), True, (1, 2, 1), (1, 0, 1), (1, 1, 1), False, (0, 0, 0), 1),
    "transposed_2d_wide": ((1, 20, 4, 3), (20, 5, 3, 2), True, (2, 3), (1, 0), (1, 2), True, (1, 2), 1),
}


def _template(wide: bool = False) -> dict:
    """The template's GEMM and convolution as a module's namespace, loaded from a file."""
    from autokernel_tui.harness.worker.loading import load_text
    from autokernel_tui.profiling import gemm_template as gt

    ns = load_text("import torch\nimport triton\nimport triton.language as tl\n" + gt.TILE + gt.GEMM + gt.CONV,
                   "gemm_template_kernels").__dict__
    if wide:  # 64-bit offsets at any size (on the H200 a 2**31-element operand wrapped 32-bit ones, run 11)
        ns["WIDE_FROM"] = 1
    return ns


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_the_convolution_template_writes_every_kind_kernelbench_has(case):
    """Issue 19: KernelBench's convolutions are 1-3-D, grouped, depthwise, transposed; the template's
    implicit GEMM matches aten.convolution on each (strides, padding, dilation, output padding)."""
    ns = _template(wide=case in ("2d_wide", "transposed_2d", "1d", "2d_depthwise_wide"))
    xs, ws, has_bias, stride, padding, dilation, transposed, output_padding, groups = CONV_CASES[case]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(xs, generator=g), torch.randn(ws, generator=g)
    bias = torch.randn(ws[1] * groups if transposed else ws[0], generator=g) if has_bias else None
    want = torch.ops.aten.convolution(x, w, bias, list(stride), list(padding), list(dilation), transposed,
                                      list(output_padding), groups)
    # the knobs: input and weight copied with their channels innermost first; K split across programs
    # (0: never; 8 per SM of the CPU's 2: every case with 8+ trips of its K loop is split)
    for channels_last, split in ((0, 0), (1, 0), (1, 8)):
        ns["CONV_CHANNELS_LAST"], ns["CONV_SPLIT_PROGRAMS_PER_SM"] = channels_last, split
        got = ns["_conv"](x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"channels last {channels_last}, split {split}: {m}")
        assert got.is_contiguous()  # the model's layout, whichever way the kernel read its operands
    depthwise = [p["meta"]["DEPTHWISE"] for p in ns["_PLANS"].values() if "DEPTHWISE" in p.get("meta", {})]
    one_channel = ws[0] == groups if transposed else ws[1] == 1  # one input channel a group: no GEMM
    assert depthwise and set(depthwise) == {one_channel}
    if len(xs) == 4:  # into a buffer laid out channels-last, as Inductor's are on the CPU
        out = torch.empty_strided(want.shape, (want[0].numel(), 1, want.shape[3] * want.shape[1], want.shape[1]))
        ns["_conv"](x, w, bias, stride, padding, dilation, transposed, output_padding, groups, out=out)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_a_weight_gradients_convolution_splits_its_long_k_and_stays_deterministic():
    """Issue 20: a weight's gradient as a convolution has few output tiles (output channels x kernel
    positions) and a K over the whole batch and image; split-K gives the GPU programs to run, each part
    summed in a fixed order (two calls agree bitwise, as the harness's determinism stage asks)."""
    from autokernel_tui.profiling.conv_backward import convolution_backward

    ns = _template()
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 3, 24, 24, generator=g), torch.randn(8, 3, 3, 3, generator=g)
    dy = torch.randn(4, 8, 12, 12, generator=g)  # K: 4 x 12 x 12 points for 27 x 8 outputs (one tile)
    want = torch.ops.aten.convolution_backward(dy, x, w, [8], [2, 2], [1, 1], [1, 1], False, [0, 0], 1,
                                               [False, True, False])[1]
    sums = []  # the grids _conv_split_sum ran with: one per split convolution

    class Counted:  # (a launch plan binds the grid once per signature and launches it on every call)
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **meta):
                sums.append(grid)
                return self.kernel[grid](*args, **meta)
            return launch

    class Ops:  # convolution_backward's convolutions, through the template's _conv
        class aten:
            class convolution:
                default = staticmethod(ns["_conv"])

    ns["_conv_split_sum"] = Counted(ns["_conv_split_sum"])
    ns["CONV_SPLIT_PROGRAMS_PER_SM"] = 8
    args = (dy, x, w, [8], [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])
    import unittest.mock
    with unittest.mock.patch.object(torch, "ops", Ops):
        first, again = convolution_backward(*args)[1], convolution_backward(*args)[1]
    assert len(sums) == 2  # K was split, in both calls
    torch.testing.assert_close(first, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(first, again)


@pytest.mark.parametrize("wide", [False, True])
def test_the_gemm_template_with_32_and_64_bit_offsets(wide):
    ns = _template(wide)
    g = torch.Generator().manual_seed(0)
    a, b, bias = torch.randn(37, 70, generator=g), torch.randn(70, 19, generator=g), torch.randn(19, generator=g)
    torch.testing.assert_close(ns["_gemm"](a, b, bias), a @ b + bias, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ns["_gemm"](a, b.t().contiguous().t(), None), a @ b, rtol=1e-4, atol=1e-4)
    x, y = torch.randn(3, 9, 33, generator=g), torch.randn(3, 33, 5, generator=g)
    torch.testing.assert_close(ns["_bmm"](x, y), x @ y, rtol=1e-4, atol=1e-4)


def test_init_calls_sets_how_many_distinct_calls_of_a_family_become_tasks(tmp_path):
    """A conv net's layers are each a call of their own: `init --calls N` makes tasks of the N costliest
    (default 3), and the rest are listed with the flag that would take them."""
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

        def forward(self, x):
            return self.b(self.a(x))

    prof = _profile("two", Two(), [torch.randn(2, 3, 6, 6)])
    one, skipped = extract_all(prof, tmp_path / "a" / "kernels", top=20, threshold=0.0, calls=1)
    assert len([p for p in one if taskspec.load_spec(p).family == "conv"]) == 1
    assert any(s["family"] == "conv" and "init --calls" in s["reason"] for s in skipped)
    two, _ = extract_all(prof, tmp_path / "b" / "kernels", top=20, threshold=0.0, calls=2)
    assert len([p for p in two if taskspec.load_spec(p).family == "conv"]) == 2


def test_init_min_share_sets_the_share_under_which_a_family_gets_no_generated_task(tmp_path, capsys):
    """Under 1% of the time a family gets no generated task, and init says which flag lowers that bar."""
    from autokernel_tui.cli import main as cli_main

    prof = _profile("gemm", Gemm(), [torch.randn(6, 24)])
    for fam in prof["families"]:
        if fam["family"] == "elementwise":
            fam["share"] = 0.005  # the LeakyReLU epilogue, as if it were half a percent of the time
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(prof))
    assert cli_main(["init", str(tmp_path / "a"), "--from-profile", str(path), "--top", "8"]) == 0
    out, err = capsys.readouterr()
    assert "elementwise" in out and "init --min-share lowers it" in out
    assert "init a: making 1 starter kernel.py files" in err and "init a: done after" in err  # progress, on stderr
    assert cli_main(["init", str(tmp_path / "b"), "--from-profile", str(path), "--top", "8", "--min-share", "0.4"]) == 0
    out = capsys.readouterr().out
    # over the bar now, the family is looked at: its calls are the GEMM chain's epilogue, as the line says
    line = next(x for x in out.splitlines() if x.strip().startswith("elementwise"))
    assert "threshold" not in line and "epilogues inside chain tasks" in line
    assert cli_main(["init", str(tmp_path / "c"), "--from-profile", str(path), "--min-share", "150"]) != 0
    assert "--min-share must be a percentage from 0 to 100" in capsys.readouterr().err


def test_init_lists_the_generated_tasks_left_without_a_starter_with_the_reason(tmp_path, capsys):
    """A generated task whose starter could not be made (here: starters turned off, as in the suite) is a
    task whose kernel.py raises: init says which and why, not only the folder names."""
    from autokernel_tui.cli import main as cli_main

    class GroupNormOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = nn.GroupNorm(2, 8)

        def forward(self, x):
            return self.gn(x)

    prof = _profile("gn", GroupNormOnly(), [torch.randn(2, 8, 3, 3)])
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(prof))
    assert cli_main(["init", str(tmp_path / "w"), "--from-profile", str(path), "--min-share", "0"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(k for k, x in enumerate(lines) if x.startswith("no starter kernel for"))
    assert "generated task(s)" in lines[head]
    assert lines[head + 1].strip().startswith("gen_native_group_norm_1: starters turned off"), out
    assert cli_main(["init", str(tmp_path / "s"), "--task", "rmsnorm"]) == 0
    assert "no starter kernel" not in capsys.readouterr().out  # starters only: nothing to say


@pytest.mark.parametrize("wide", [False, True])
def test_the_gemm_template_writes_matrix_vector_products_as_split_k_reductions(wide):
    # KernelBench level 1 problem 4 (2048 x 1048576 times a column): through the tl.dot tile, 32 programs
    # and 63 of 64 columns wasted, 47x torch.compile's time on the H200 (run 13). Both orientations, a
    # bias, strided operands, 16-bit inputs, K splits that do not divide evenly.
    ns = _template(wide)
    g = torch.Generator().manual_seed(0)
    for m, k, n in [(37, 1000, 1), (1, 700, 29), (5, 3, 1), (300, 5000, 1)]:
        a, b, bias = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(n, generator=g)
        torch.testing.assert_close(ns["_gemm"](a, b, bias), a @ b + bias, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ns["_gemm"](a, b.t().contiguous().t(), None), a @ b, rtol=1e-4, atol=1e-4)
        out = torch.empty_strided((m, n), (1, m))  # written into a column-major buffer
        ns["_gemm"](a, b, None, out=out)
        torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
        ah, bh = a.to(torch.bfloat16), b.to(torch.bfloat16)
        torch.testing.assert_close(ns["_gemm"](ah, bh, None).float(), ah.float() @ bh.float(), rtol=2e-2, atol=5e-2)


KB_MATVEC = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 40
K = 300


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []
'''


def test_a_matrix_vector_problem_gets_the_gemv_knobs_and_passes_the_harness(tmp_path, monkeypatch):
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.ledger.workspace import init_workspace

    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")  # the suite turns starter-making off for speed

    problem = tmp_path / "4_Matrix_vector_multiplication_.py"
    problem.write_text(KB_MATVEC)
    ws = init_workspace(tmp_path / "ws", from_kernelbench=[problem])
    task = ws / "kernels" / "kb_4_matrix_vector_multiplication"
    spec = taskspec.load_spec(task)
    assert {"GEMV_BLOCK_M", "GEMV_BLOCK_K", "GEMV_NUM_WARPS", "GEMV_PROGRAMS_PER_SM"} <= set(spec.knob_space)
    assert "_gemv(" in (task / "kernel.py").read_text()
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


@pytest.mark.gpu
def test_the_gemv_path_at_kernelbench_size_on_the_gpu():
    # KernelBench level 1 problem 4's own sizes: A is 2**31 elements (64-bit offsets), K split across SMs.
    ns = _template()
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(2048, 1 << 20, device="cuda", generator=g)
    x = torch.rand(1 << 20, 1, device="cuda", generator=g)
    want = (a.double() @ x.double()).float()
    got = ns["_gemm"](a, x, None)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    assert torch.equal(got, ns["_gemm"](a, x, None))  # the splits are added in a fixed order


POOL_CASES = {  # (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    "3d-kernelbench": ((2, 3, 9, 8, 7), 3, 2, 1, False, True, None),
    "3d-ceil-no-pad-count": ((1, 2, 7, 6, 5), (3, 2, 2), (2, 2, 1), (1, 1, 0), True, False, None),
    "2d-divisor": ((2, 2, 9, 10), 4, 3, 2, False, True, 5),
    "1d-ceil": ((3, 4, 11), 3, 2, 1, True, True, None),
    "2d-unbatched": ((3, 8, 9), 3, 1, 1, False, False, None),
}


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_the_average_pooling_template_matches_torch(case):
    # KernelBench level 1 problem 46 (AvgPool3d, a 27-element window): Inductor falls back to aten there,
    # so its starter had no kernel; the template writes PyTorch's divisor rules, ceil_mode and padding.
    import torch.nn.functional as F
    from autokernel_tui.profiling import gemm_template as gt

    ns = {"__name__": "gemm_template"}
    exec("import torch\nimport triton\nimport triton.language as tl\n" + gt.TILE + gt.POOL, ns)
    shape, k, s, p, ceil, count_pad, div = POOL_CASES[case]
    nd = len(shape) - 2 if case != "2d-unbatched" else 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    kwargs = dict(ceil_mode=ceil, count_include_pad=count_pad)
    if div is not None:
        kwargs["divisor_override"] = div
    want = pool(x, k, s, p, **kwargs)
    got = ns["_avg_pool"](x, nd, k, s, p, ceil, count_pad, div)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    strided = x.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same values, another layout
    out = torch.empty_like(want).transpose(-1, -2).contiguous().transpose(-1, -2)
    ns["_avg_pool"](strided, nd, k, s, p, ceil, count_pad, div, out=out)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def test_average_pooling_inductor_leaves_to_aten_gets_a_starter():
    from autokernel_tui.profiling.inductor_starter import starter_source

    def pool3d(x):
        return torch.nn.functional.avg_pool3d(x, 3, 2, 1)

    r = starter_source(pool3d, (torch.randn(2, 3, 9, 8, 7),), "cpu")
    assert r.ok, r.reason
    assert "_avg_pool(" in r.source and set(r.knobs) == {"POOL_BLOCK", "POOL_NUM_WARPS"}


def _kernelbench_task(tmp_path, monkeypatch, filename: str, text: str):
    """``init --from-kernelbench`` of one problem file written here, starters made; its task folder."""
    import re

    from autokernel_tui.ledger.workspace import init_workspace

    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")  # the suite turns starter-making off for speed
    problem = tmp_path / filename
    problem.write_text(text)
    ws = init_workspace(tmp_path / "ws", from_kernelbench=[problem])
    return ws / "kernels" / ("kb_" + re.sub(r"[^a-z0-9_]+", "_", problem.stem.lower()).strip("_"))


KB_ATTENTION = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, Q, K, V):
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V)


def get_inputs():
    return [torch.randn(2, 3, 20, 24), torch.randn(2, 3, 20, 24), torch.randn(2, 3, 20, 24)]


def get_init_inputs():
    return []
'''


def test_attention_inductor_leaves_to_a_library_gets_a_written_out_starter(tmp_path, monkeypatch):
    """KernelBench level 1 problem 97 (bidirectional attention, D = 1024) had no starter: Inductor calls a
    library attention kernel. Captured again under torch's math backend, it is Inductor's softmax between
    two of the GEMM template's batched matmuls, and passes the harness (here at a small size)."""
    from autokernel_tui.harness.runner import Harness

    task = _kernelbench_task(tmp_path, monkeypatch, "97_ScaledDotProductAttention.py", KB_ATTENTION)
    source = (task / "kernel.py").read_text()
    assert "NO STARTER" not in source, source[:800]
    assert "_bmm(" in source and "Attention is written out" in source
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


KB_CONV_RELU_BIAS = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x


def get_inputs():
    return [torch.rand(2, 20, 9, 8)]


def get_init_inputs():
    return [20, 16, 3, (16, 1, 1)]
'''


def test_a_kernelbench_chain_of_a_convolution_and_pointwise_ops_starts_fused(tmp_path, monkeypatch):
    """KernelBench level 2's staple (Conv2D_ReLU_BiasAdd): Inductor's starter is a library convolution plus
    a Triton kernel; the GEMM template runs the ReLU and the bias add in the convolution's epilogue. The
    chain's tensors come from kernel_fn's (inputs, then the Model's parameters in STATE order)."""
    from autokernel_tui.harness.runner import Harness

    task = _kernelbench_task(tmp_path, monkeypatch, "1_Conv2D_ReLU_BiasAdd.py", KB_CONV_RELU_BIAS)
    source = (task / "kernel.py").read_text()
    assert "gemm_template" in source.splitlines()[0] and "kernel=_conv_kernel_e0" in source, source[:600]
    assert "gemm_template" in (task / "task.toml").read_text()
    assert {"FUSE_EPILOGUE", "CONV_CHANNELS_LAST"} <= set(taskspec.load_spec(task).knob_space)
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason


def test_a_depthwise_convolution_becomes_an_elementwise_task_that_passes_the_harness(tmp_path):
    """Issue 19: a depthwise convolution (MobileNet's, ConvNeXt's; KernelBench level 1, 82-86) as the
    template's implicit GEMM wasted all but one column of every tile (run 16, H100: 20x torch.compile);
    its generated task computes it elementwise, with that path's tile as knobs, and passes the harness."""
    from autokernel_tui.harness.runner import Harness

    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU())
    prof = _profile("dw", model, [torch.randn(2, 8, 9, 7)])
    created, _ = _extract(prof, tmp_path)
    (task,) = _generated(created, "conv")
    assert "_conv(" in (task / "kernel.py").read_text()
    spec = taskspec.load_spec(task)
    assert {"DW_BLOCK_M", "DW_BLOCK_N", "DW_NUM_WARPS"} <= set(spec.knob_space)
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason
