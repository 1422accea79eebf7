"""A Linear whose output only a GELU takes: the matmul starter applies the GELU in its epilogue.

The pairs come from a trace of the model (``graph_patch.epilogue_pairs``): each module called once, the
Linear's output used by nothing but the activation. Everything here runs the real matmul starter under
Triton's interpreter at small shapes (the conftest sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from autokernel_tui.profiling import graph_patch as gp
from autokernel_tui.profiling.patch import FusedAway, LinearKernel, load_backwards, load_kernel, patch_model, unpatch_model
from autokernel_tui.profiling.verify import format_result, kernel_paths, verify
from autokernel_tui.tasks.spec import starters_dir

STARTERS = starters_dir()


class Block(nn.Module):
    """GPT-2's MLP as its block writes it: shapes unpacked in Python (torch.fx's symbolic trace stops
    there; the dispatcher-level trace does not)."""

    def __init__(self, wiring: str, dim: int = 24):
        super().__init__()
        self.wiring = wiring
        self.c_fc = nn.Linear(dim, 2 * dim)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(2 * dim, dim)
        self.other = nn.Linear(dim, 2 * dim)

    def forward(self, x):
        b, s, d = x.shape
        if self.wiring == "mlp":
            h = self.act(self.c_fc(x))
        elif self.wiring == "residual":  # the Linear's output read again after the GELU: no fusion
            h = self.c_fc(x)
            h = self.act(h) + h
        elif self.wiring == "act-twice":  # one GELU module on two Linears' outputs: no fusion
            h = self.act(self.c_fc(x)) + self.act(self.other(x))
        else:  # "two-inputs": the activation module also reads x (a GELU of a sum): no fusion
            h = self.act(self.c_fc(x) + self.other(x))
        return self.c_proj(h.view(b, s, -1)) + x


def _model(wiring: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(wiring), Block("mlp", 24)).eval()


@pytest.mark.parametrize("wiring", ["mlp", "residual", "act-twice", "two-inputs"])
def test_only_a_linear_whose_output_the_gelu_alone_takes_is_paired(wiring):
    model = _model(wiring)
    x = torch.randn(2, 3, 24)
    kernel = load_kernel(STARTERS / "matmul" / "kernel.py")
    pairs = gp.epilogue_pairs(model, (x,), {"matmul": kernel})
    want = {id(model[1].c_fc): model[1].act}
    if wiring == "mlp":
        want[id(model[0].c_fc)] = model[0].act
    assert pairs == want
    # A kernel_fn that applies no activation is never paired; nor is a module a generated chain runs through.
    assert gp.epilogue_pairs(model, (x,), {"matmul": lambda a, b, bias=None: a @ b}) == {}
    assert gp.epilogue_pairs(model, (x,), {"matmul": kernel}, skip={id(model[1].act)}) == (
        {id(model[0].c_fc): model[0].act} if wiring == "mlp" else {})


def test_the_fused_model_computes_the_same_eager_as_a_custom_op_and_unpatched_again():
    model = _model("mlp")
    x = torch.randn(2, 3, 24)
    with torch.no_grad():
        want = model(x)
    kernel = load_kernel(STARTERS / "matmul" / "kernel.py")
    calls = []

    def spy(a, b, bias=None, activation="none"):
        calls.append(activation)
        return kernel(a, b, bias, activation)

    for custom_ops in (False, True):
        patched = copy.deepcopy(model)
        fuse = gp.epilogue_pairs(patched, (x,), {"matmul": spy})
        calls.clear()
        counts = patch_model(patched, {"matmul": spy}, custom_ops=custom_ops, fuse=fuse)
        assert counts == {"matmul": 6, "gelu": 2}
        assert isinstance(patched[0].act, FusedAway) and patched[0].c_fc.activation == "gelu_tanh"
        assert "activation=gelu_tanh" in repr(patched[0].c_fc) and "in the epilogue of c_fc" in repr(patched[0].act)
        with torch.no_grad():
            torch.testing.assert_close(patched(x), want, atol=1e-5, rtol=1e-5)
        assert sorted(calls) == ["gelu_tanh"] * 2 + ["none"] * 2  # c_fc, c_proj; "other" is not called
    unpatch_model(patched)
    assert type(patched[0].act) is nn.GELU and type(patched[0].c_fc) is nn.Linear


def test_with_a_gelu_kernel_too_the_fused_gelus_are_left_to_the_epilogue_and_counted_once():
    model = _model("mlp")
    x = torch.randn(2, 3, 24)
    kernels = {"gelu": load_kernel(STARTERS / "gelu" / "kernel.py"),
               "matmul": load_kernel(STARTERS / "matmul" / "kernel.py")}
    fuse = gp.epilogue_pairs(model, (x,), kernels)
    with torch.no_grad():
        want = model(x)
    assert patch_model(model, kernels, ["gelu", "matmul"], fuse=fuse) == {"gelu": 2, "matmul": 6}
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
    unpatch_model(model)
    assert type(model[0].act) is nn.GELU


def test_the_fused_model_trains_through_the_reference():
    # The backward of the fused Linear is autograd through the task's reference, addmm then the GELU:
    # every parameter's gradient as the model's own.
    model = _model("mlp").train()
    x = torch.randn(2, 3, 24)
    model(x).square().sum().backward()
    kernel = load_kernel(STARTERS / "matmul" / "kernel.py")
    trained = copy.deepcopy(model)
    trained.zero_grad()
    fuse = gp.epilogue_pairs(trained, (x,), {"matmul": kernel})
    backwards = load_backwards({"matmul": {"reference": STARTERS / "matmul" / "reference.py"}})
    patch_model(trained, {"matmul": kernel}, backwards=backwards, fuse=fuse)
    assert isinstance(trained[0].c_fc, LinearKernel) and trained[0].c_fc.activation == "gelu_tanh"
    trained(x).square().sum().backward()
    theirs = dict(model.named_parameters())
    for name, p in trained.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name.replace(".original", "")].grad, atol=1e-4, rtol=1e-4,
                                   msg=name)


def test_verify_fuses_gpt2s_mlp_gelu_and_says_so_in_its_counts():
    r = verify("gpt2-tiny", kernel_paths(STARTERS, ["matmul", "gelu"]), dtype="float32", device="cpu", iters=1,
               warmup=0, profile_steps=1, modes=("eager", "eager+kernels"))
    assert r["correct"], r["rel_l2_vs_original"]
    # two blocks: each c_fc takes its GELU; four Linears a block and the LM head (no bias, no GELU)
    assert r["patched"] == {"matmul": 9, "gelu": 2} and r["in_matmul_epilogue"] == 2
    assert "gelu (2 modules, 2 of them in matmul's epilogue)" in format_result(r)


def test_a_model_the_trace_cannot_follow_is_patched_without_fusing(monkeypatch):
    # make_fx follows most models; where it raises (graph_patch.trace's GraphPatchError), the Linears and
    # GELUs are patched apart, as before, instead of verify failing.
    def refuse(model, inputs):
        raise gp.GraphPatchError("the model could not be traced to put generated kernels in: (test)")

    monkeypatch.setattr(gp, "trace", refuse)
    model = _model("mlp")
    x = torch.randn(2, 3, 24)
    kernel = load_kernel(STARTERS / "matmul" / "kernel.py")
    assert gp.epilogue_pairs(model, (x,), {"matmul": kernel}) == {}
    assert patch_model(model, {"matmul": kernel}, fuse={}) == {"matmul": 6} and type(model[0].act) is nn.GELU
