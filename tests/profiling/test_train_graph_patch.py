"""Generated kernels in a training step (issue 20 with issue 19): a training profile's forward and
backward tasks of one recorded chain become one differentiable site of the traced training forward
(``graph_patch.patch_graph(..., backwards=...)``), and ``verify --train`` checks the loss and every
gradient with them in. CPU, Triton interpreter, tiny shapes."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel_tui.profiling import graph_patch as gp
from autokernel_tui.profiling.amdahl import rank
from autokernel_tui.profiling.capture import profile_bundle
from autokernel_tui.profiling.extract import extract_all
from autokernel_tui.profiling.verify import generated_backwards, kernel_paths, patched_copy, without_placeholders
from autokernel_tui.profiling.zoo import ModelBundle


TWO_CONVS_SOURCE = '''
import torch, torch.nn as nn, torch.nn.functional as F


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 3, padding=1, stride=2)

    def forward(self, x):
        return self.conv2(F.relu(self.conv1(x)))


def make():
    return TwoConvs(), (torch.randn(2, 3, 6, 6),)
'''  # source text: the CLI loads it as a model file, the exported package's test runs it without autokernel_tui
exec(TWO_CONVS_SOURCE)


class ConvBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def _tasks(model, x, root, monkeypatch):
    """The model's training profile made into tasks under ``root``: {task: kernel.py}, placeholders out."""
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")  # the convolutions' backward kernels need them
    prof = rank(profile_bundle(ModelBundle("net", model, (x,), True, "float32", "cpu", 0, 0), steps=1, warmup=0))
    extract_all(prof, root, top=20, threshold=0.0)
    kernels, _ = without_placeholders(kernel_paths(root))
    return kernels


@pytest.fixture(scope="module")
def two_convs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        torch.manual_seed(0)
        model, x = TwoConvs(), torch.randn(2, 3, 6, 6)
        kernels = _tasks(model, x, tmp_path_factory.mktemp("ws") / "kernels", mp)
    finally:
        mp.undo()
    # conv1 -> relu and conv2: each a forward task and a backward task (Triton: the GEMM template's
    # implicit GEMMs, the backward's written as convolutions), or at least the forward ones.
    assert {"gen_convolution_relu_1", "gen_convolution_2", "gen_convolution_bwd_2"} <= set(kernels), sorted(kernels)
    return model, x, kernels


def _step(m, x):
    for p in m.parameters():
        p.grad = None
    loss = (m(x).float() ** 2).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in m.parameters()]


def _same_step(a, b, x, **tol):
    (la, ga), (lb, gb) = _step(a, x), _step(b, x)
    torch.testing.assert_close(lb, la, **tol)
    for p, q in zip(ga, gb):
        torch.testing.assert_close(q, p, **tol)


def test_a_training_step_runs_the_forward_and_backward_kernels_and_matches_autograd(two_convs):
    model, x, kernels = two_convs
    patched, counts = gp.patch_graph(model, (x,), kernels, backwards=generated_backwards(kernels))
    assert isinstance(patched, gp.TrainGraphPatched)
    assert counts["gen_convolution_2"] == counts["gen_convolution_bwd_2"] == 1
    assert counts["gen_convolution_relu_1"] == 1
    code = patched.graph_module.code
    assert "aten.convolution" not in code and "aten.relu" not in code  # every chain a kernel call
    with torch.profiler.profile() as prof:
        _same_step(model, patched, x, rtol=1e-4, atol=1e-5)
    names = {e.name for e in prof.events()}
    assert "autokernel::gen_convolution_2" in names  # the forward kernel
    assert "autokernel::gen_convolution_bwd_2" in names  # the backward kernel, not autograd of the chain
    assert patched.fallbacks == 0
    # The parameters are the model's: the gradients landed on them, and an optimizer step is seen.
    assert {id(p) for p in patched.parameters()} == {id(p) for p in model.parameters()}
    with torch.no_grad():
        model.conv2.bias.add_(1.0)
    torch.testing.assert_close(patched(x), model(x), rtol=1e-4, atol=1e-5)


def test_an_input_needing_a_gradient_the_backward_kernel_does_not_give_is_differentiated_by_autograd(two_convs):
    """The recorded step needed no gradient for the image (grad_inputs: weight and bias); a caller who
    asks for one gets it from autograd through the chain, never a silent None."""
    model, x, kernels = two_convs
    patched, _ = gp.patch_graph(model, (x,), kernels, backwards=generated_backwards(kernels))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(xa).square().mean().backward()
    patched(xb).square().mean().backward()
    assert xb.grad is not None
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)


def test_a_backward_task_alone_runs_after_the_recorded_forward(two_convs):
    model, x, kernels = two_convs
    only = {"gen_convolution_bwd_2": kernels["gen_convolution_bwd_2"]}
    patched, counts = gp.patch_graph(model, (x,), only, backwards=generated_backwards(only))
    assert counts == {"gen_convolution_bwd_2": 1}
    _same_step(model, patched, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backward", ["kernels", "autograd"])
def test_compiled_the_sites_are_custom_ops_that_train(two_convs, backward):
    """Under Inductor, with the backward kernels as ops of their own, and without them: autograd through
    the chain then runs in the backward formula (inside the backward kernel's op, below autograd, it
    recorded nothing and every gradient came back empty)."""
    model, x, kernels = two_convs
    if backward == "autograd":  # forward tasks alone: still a training graph, each site differentiable
        kernels = {t: p for t, p in kernels.items() if "_bwd_" not in t}
        eager, _ = gp.patch_graph(model, (x,), kernels, backwards=generated_backwards(kernels))
        _same_step(model, eager, x, rtol=1e-4, atol=1e-5)
    patched, _ = gp.patch_graph(model, (x,), kernels, custom_ops=True, backwards=generated_backwards(kernels))
    _same_step(model, torch.compile(patched, dynamic=False), x, rtol=1e-4, atol=1e-5)


def test_inference_leaves_backward_tasks_out(two_convs):
    """A backward task's kernel takes grad_outs too: in an inference patch it would be called wrong."""
    model, x, kernels = two_convs
    m, counts = patched_copy(model.eval(), kernels, None, (x,))
    model.train()
    assert "gen_convolution_bwd_2" not in counts and counts["gen_convolution_2"] == 1
    with torch.no_grad():
        torch.testing.assert_close(m(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_batch_norm_in_training_moves_its_running_statistics_and_a_buffers_increment_stays(tmp_path,
                                                                                            monkeypatch):
    """A kernel returns the chain's outputs; a batch norm in training also moves its running statistics.
    The site does that itself (the batch's mean and unbiased variance, by the recorded momentum), and
    a chain that writes into a buffer (the step count's ``+= 1``) stays as the model runs it, saying why:
    after steps with the kernels the buffers are eager's."""
    torch.manual_seed(0)
    model, x = ConvBatchNorm(), torch.randn(2, 3, 5, 5)
    kernels = _tasks(model, x, tmp_path / "kernels", monkeypatch)
    eager, patched_model = copy.deepcopy(model), copy.deepcopy(model)
    steps_before = int(model.bn.num_batches_tracked)
    patched, counts = gp.patch_graph(patched_model, (x,), kernels, backwards=generated_backwards(kernels))
    norm = [t for t in kernels if "batch_norm" in t]
    assert norm and all(counts[t] == 1 for t in norm), counts
    assert "aten.native_batch_norm" not in patched.graph_module.code
    counter = [t for t, why in patched.left_out.items() if "writes into a tensor others see" in why]
    assert counter and all(counts[t] == 0 for t in counter), (counts, patched.left_out)
    for _ in range(2):
        _same_step(eager, patched, x + 1.0, rtol=1e-4, atol=1e-5)  # a batch of other statistics than the trace's
    for (name, a), b in zip(eager.named_buffers(), patched_model.buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert int(patched_model.bn.num_batches_tracked) == steps_before + 2
    assert not torch.equal(patched_model.bn.running_mean, model.bn.running_mean)  # they moved
    # Compiled (the sites custom ops, the statistics' updates aten ops on the buffers): the same.
    compiled_model = copy.deepcopy(model)
    compiled, _ = gp.patch_graph(compiled_model, (x,), kernels, custom_ops=True, backwards=generated_backwards(kernels))
    compiled = torch.compile(compiled, dynamic=False)
    eager = copy.deepcopy(model)
    for _ in range(2):
        _same_step(eager, compiled, x + 1.0, rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager.named_buffers(), compiled_model.buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)



def test_verify_train_on_the_cli_puts_the_generated_kernels_in_the_training_step(two_convs, tmp_path, capsys):
    import json

    from autokernel_tui.cli import main as cli_main

    _, _, kernels = two_convs
    factory = tmp_path / "two_convs.py"
    factory.write_text(TWO_CONVS_SOURCE)
    out = tmp_path / "verify.json"
    kdir = next(iter(kernels.values())).parent.parent
    assert cli_main(["verify", "--kernels", str(kdir), "--model", f"{factory}:make", "--train", "--device", "cpu",
                     "--iters", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    r = json.loads(out.read_text())
    assert r["correct"] and "training step: PASS" in text, text
    assert r["patched"]["gen_convolution_2"] == r["patched"]["gen_convolution_bwd_2"] == 1
    assert r["backward"]["gen_convolution_2"] == "its chain's backward kernel (gen_convolution_bwd_2)"
    assert "gen_convolution_2 (1 graph sites; backward: its chain's backward kernel" in text


def test_the_exported_package_trains_with_generated_kernels_without_autokernel(two_convs, tmp_path):
    """``patch_graph(model, inputs, train=True)`` of an exported package, in a process that cannot import
    autokernel_tui: the step matches the model's; inference leaves the backward task out."""
    import subprocess
    import sys

    from autokernel_tui.cli import main as cli_main
    from standalone import without_autokernel

    _, _, kernels = two_convs
    out = tmp_path / "pkgs" / "conv_kernels"
    kdir = next(iter(kernels.values())).parent.parent
    assert cli_main(["export", str(out), "--kernels", str(kdir), "--tasks", ",".join(kernels)]) == 0
    script = without_autokernel(out.parent, "conv_kernels") + TWO_CONVS_SOURCE + '''
torch.manual_seed(0)
model, (x,) = make()
trained, counts = conv_kernels.patch_graph(model, (x,), train=True)
assert counts["gen_convolution_2"] == counts["gen_convolution_bwd_2"] == 1, counts
for m in (model, trained):
    m.zero_grad()
    (m(x) ** 2).mean().backward()
for p, q in zip(model.parameters(), trained.parameters()):
    torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
inference, counts = conv_kernels.patch_graph(model.eval(), (x,))
assert "gen_convolution_bwd_2" not in counts and counts["gen_convolution_2"] == 1, counts
print("TRAINED", "autokernel_tui" in sys.modules)
'''
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "TRAINED False" in done.stdout, done.stdout + done.stderr[-2000:]
