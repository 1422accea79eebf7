"""Models: the zoo, user factories, KernelBench files; bad input is one clear line."""

import subprocess
import sys
import textwrap

import pytest

from autokernel_tui.profiling.zoo import ModelError, load_model, scalar_loss


def test_zoo_models_run_inference_and_training():
    for name in ("gpt2-tiny", "llama-tiny", "bert-tiny"):
        b = load_model(name, dtype="float32", device="cpu")
        assert b.step().shape[:2] == (2, 16)
        t = load_model(name, dtype="float32", device="cpu", train=True)
        assert t.step().dim() == 0
        assert any(p.grad is not None for p in t.model.parameters())


def test_full_size_configs_are_the_real_ones():
    import torch

    # Built on the meta device: no memory, just the parameter count.
    from autokernel_tui.profiling.zoo import ZOO, _modules

    classes = _modules()
    with torch.device("meta"):
        gpt2 = classes["GPT2"]()
        llama = classes["Llama"](layers=1)
    assert sum(p.numel() for p in gpt2.parameters()) == pytest.approx(124.4e6, rel=0.01)  # tied head
    blk = llama.blocks[0]
    assert blk.attn.k_proj.weight.shape == (8 * 128, 4096) and blk.mlp.gate_proj.weight.shape == (11008, 4096)
    assert ZOO["llama"][1] == {}  # LLaMA-7B dims by default


def test_user_factory_and_kernelbench_files(tmp_path):
    f = tmp_path / "mymodel.py"
    f.write_text(textwrap.dedent("""
        import torch
        def make(batch=3, seq=5):
            return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), (torch.randn(batch, seq, 8),)
    """))
    b = load_model(f"{f}:make", batch=4, dtype="float32", device="cpu")
    assert b.step().shape == (4, 5, 8)
    kb = tmp_path / "kb.py"
    kb.write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.lin = torch.nn.Linear(n, n)
            def forward(self, x):
                return torch.softmax(self.lin(x), dim=-1)
        def get_inputs():
            return [torch.randn(2, 16)]
        def get_init_inputs():
            return [16]
    """))
    b = load_model(str(kb), dtype="bfloat16", device="cpu", train=True)
    assert b.inputs[0].dtype.is_floating_point and str(b.inputs[0].dtype) == "torch.bfloat16"
    assert b.step().dim() == 0


@pytest.mark.parametrize("spec,message", [
    ("nope", "unknown model 'nope'"),
    ("/no/such/file.py", "no such model file"),
    ("hf:GPT2LMHeadModel", "transformers"),
])
def test_bad_models_are_one_line(spec, message):
    with pytest.raises(ModelError, match=message) as info:
        load_model(spec, device="cpu", dtype="float32")
    assert "\n" not in str(info.value)


def test_broken_user_file_is_one_line_on_the_command_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nraise RuntimeError('the model file is broken')\n")
    out = subprocess.run([sys.executable, "-m", "autokernel_tui", "profile", f"{bad}:make"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "the model file is broken" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_scalar_loss_refuses_integer_outputs():
    import torch

    with pytest.raises(ModelError):
        scalar_loss(torch.arange(3))
