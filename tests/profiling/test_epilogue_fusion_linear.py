"""A Linear whose output only one module takes, the two as one kernel: a GELU in the matmul starter's
epilogue, a cross-entropy loss and the LM head before it in the linear_cross_entropy starter.

The pairs come from a trace of the model (``graph_patch.epilogue_pairs``): each module called once, the
Linear's output used by nothing but the other module. Everything here runs the real starters under
Triton's interpreter at small shapes (the conftest sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from autokernel_tui.profiling import graph_patch as gp
from autokernel_tui.profiling.patch import (FusedAway, LinearCrossEntropyKernel, LinearKernel, fused_counts,
                                            load_backwards, load_kernel, patch_model, unpatch_model)
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
        assert "activation=gelu_tanh" in repr(patched[0].c_fc)
        assert "gelu, done by the matmul kernel of c_fc" in repr(patched[0].act)
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
    assert r["patched"] == {"matmul": 9, "gelu": 2} and r["fused"] == {"gelu": {"matmul": 2}}
    assert "gelu (2 modules, 2 of them done by the matmul kernel)" in format_result(r)


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


class TinyLM(nn.Module):
    """An LM head tied to its embedding and its loss, as GPT-2's; ``returns_logits``: the logits also go
    out, so the head must write them and no fused loss may stand in. (A view between the head and the
    loss, in the parent's code, also keeps them apart: the head would hand that code its input instead
    of logits, and a view naming the vocabulary's size would then be wrong.)"""

    def __init__(self, returns_logits: bool = False, vocab: int = 300, dim: int = 24):
        super().__init__()
        self.returns_logits = returns_logits
        self.wte = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.loss = nn.CrossEntropyLoss()

    def forward(self, idx, targets):  # idx, targets: [tokens]
        logits = self.lm_head(torch.tanh(self.fc(self.wte(idx))))
        loss = self.loss(logits, targets)
        return (loss, logits) if self.returns_logits else loss


def _lm_inputs():
    torch.manual_seed(1)
    idx = torch.randint(0, 300, (14,))
    targets = torch.randint(0, 300, (14,))
    targets[3] = -100  # a padding position
    return idx, targets


def _lce_kernels():
    return {"linear_cross_entropy": load_kernel(STARTERS / "linear_cross_entropy" / "kernel.py"),
            "matmul": load_kernel(STARTERS / "matmul" / "kernel.py")}


def test_an_lm_head_whose_logits_only_the_loss_takes_runs_in_the_loss_kernel():
    torch.manual_seed(0)
    model = TinyLM().eval()
    inputs = _lm_inputs()
    kernels = _lce_kernels()
    assert gp.epilogue_pairs(model, inputs, kernels) == {id(model.lm_head): model.loss}
    logits_too = TinyLM(returns_logits=True).eval()  # the logits leave the model: they must be written
    assert gp.epilogue_pairs(logits_too, inputs, kernels) == {}
    with torch.no_grad():
        want = model(*inputs)
    for custom_ops in (False, True):
        patched = copy.deepcopy(model)
        fuse = gp.epilogue_pairs(patched, inputs, kernels)
        counts = patch_model(patched, kernels, custom_ops=custom_ops, fuse=fuse)
        assert counts == {"linear_cross_entropy": 1, "matmul": 2, "cross_entropy": 1}  # fc, and the head fused
        assert fused_counts(patched) == {"matmul": {"linear_cross_entropy": 1},
                                         "cross_entropy": {"linear_cross_entropy": 1}}
        assert isinstance(patched.loss, LinearCrossEntropyKernel) and isinstance(patched.lm_head, FusedAway)
        with torch.no_grad():
            torch.testing.assert_close(patched(*inputs), want, atol=1e-5, rtol=1e-5)
    unpatch_model(patched)
    assert type(patched.lm_head) is nn.Linear and type(patched.loss) is nn.CrossEntropyLoss
    assert patched.lm_head.weight is patched.wte.weight


def test_in_training_the_head_and_loss_stay_apart_without_a_backward_kernel():
    # Autograd through the task's reference would compute the logits again in the backward (a second
    # LM-head GEMM a step): slower than the model's own. The head then stays a matmul, the loss the
    # cross_entropy kernel, and the step's gradients are the model's.
    torch.manual_seed(0)
    model = TinyLM().train()
    inputs = _lm_inputs()
    model(*inputs).backward()
    trained = copy.deepcopy(model)
    trained.zero_grad()
    kernels = {**_lce_kernels(), "cross_entropy": load_kernel(STARTERS / "cross_entropy" / "kernel.py")}
    backwards = load_backwards({f: {"reference": STARTERS / f / "reference.py"} for f in kernels})
    counts = patch_model(trained, kernels, backwards=backwards, fuse=gp.epilogue_pairs(trained, inputs, kernels))
    assert counts == {"linear_cross_entropy": 0, "matmul": 2, "cross_entropy": 1} and fused_counts(trained) == {}
    trained(*inputs).backward()
    theirs = dict(model.named_parameters())
    for name, p in trained.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name.replace(".original", "")].grad, atol=1e-4, rtol=1e-4,
                                   msg=name)


def test_the_exported_package_runs_an_eval_loss_as_one_kernel_without_autokernel(tmp_path):
    # An evaluation pass (a loss, no gradients): patch(model, train=False, example_inputs=...) puts the
    # head and its loss in as one kernel.
    from autokernel_tui.cli import main as cli_main
    from standalone import without_autokernel

    out = tmp_path / "pkgs" / "lce_kernels"
    assert cli_main(["export", str(out), "--kernels", str(STARTERS), "--tasks", "linear_cross_entropy"]) == 0
    script = without_autokernel(out.parent, "lce_kernels") + textwrap.dedent("""
        import torch
        import torch.nn as nn
        torch.manual_seed(0)
        wte = nn.Embedding(300, 24)
        head = nn.Linear(24, 300, bias=False)
        head.weight = wte.weight

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.lm_head, self.loss = wte, head, nn.CrossEntropyLoss()

            def forward(self, idx, targets):
                return self.loss(self.lm_head(torch.tanh(self.wte(idx))), targets)

        model = LM().eval()
        idx, targets = torch.randint(0, 300, (14,)), torch.randint(0, 300, (14,))
        with torch.no_grad():
            ref = model(idx, targets)
            counts = lce_kernels.patch(model, train=False, example_inputs=(idx, targets))
            got = model(idx, targets)
        print(counts, float(ref), float(got), "autokernel_tui" in sys.modules)
        assert counts == {"linear_cross_entropy": 1, "matmul": 1, "cross_entropy": 1}
        assert abs(float(got) - float(ref)) < 1e-4 and type(model.lm_head).__name__ == "FusedAway"
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert "False" in res.stdout


def test_verify_loss_runs_gpt2s_head_and_loss_as_one_kernel_on_the_cli(tmp_path, capsys):
    # verify --loss: GPT-2's evaluation pass (targets in, the loss out, no gradients), where the head's
    # logits go only to the loss. Through the real CLI, with the JSON it writes.
    import json

    from autokernel_tui.cli import main as cli_main

    out = tmp_path / "verify.json"
    rc = cli_main(["verify", "--kernels", str(STARTERS), "--tasks", "linear_cross_entropy,cross_entropy",
                   "--model", "gpt2-tiny", "--loss", "--dtype", "float32", "--device", "cpu", "--iters", "1",
                   "--modes", "eager,eager+kernels", "--no-select", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    r = json.loads(out.read_text())
    assert r["correct"] and r["mode"] == "forward with its loss (an evaluation pass)"
    assert r["patched"] == {"linear_cross_entropy": 1, "cross_entropy": 1, "matmul": 1}
    assert "cross_entropy (1 modules, 1 of them done by the linear_cross_entropy kernel)" in text
    assert "matmul (1 modules, 1 of them done by the linear_cross_entropy kernel)" in text


def test_a_kernel_whose_module_never_runs_is_not_offered_to_the_selection():
    # GPT-2's inference returns the logits: its loss module is patched but never called. Timed alone it
    # measures noise, which the 0.5% bar kept in run 28 (cross_entropy "shipped" for an inference pass).
    from autokernel_tui.profiling.verify import _selection_reason, idle_tasks

    per_family = [{"family": "cross_entropy", "before_us": 0.0, "after_us": 0.0},
                  {"family": "gelu", "before_us": 420.0, "after_us": 0.0},  # fused away: it ran before
                  {"family": "matmul", "before_us": 3000.0, "after_us": 3100.0}]
    counts = {"cross_entropy": 1, "gelu": 12, "matmul": 49, "rotary": 0, "gen_addmm_1": 2}
    assert idle_tasks(counts, per_family, {"gen_addmm_1": "matmul"}) == ["cross_entropy"]
    sel = {"mode": "cudagraphs", "ship_families": ["gelu"], "ship_speedup": 1.02, "not_run": ["cross_entropy"],
           "alone": {"gelu": {"correct": True, "speedup": 1.02}}, "sets": {"kept": {"families": ["gelu"],
                                                                                   "median_us": 5400.0}}}
    assert "not run by this pass, so not shipped: cross_entropy" in _selection_reason(sel)
