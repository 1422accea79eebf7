"""Models to profile: a built-in zoo with random weights, Hugging Face classes, user files.

``load_model(spec, ...) -> ModelBundle`` accepts:

* a zoo name: ``gpt2``, ``llama``, ``bert``, ``resnet`` (ResNet-18), ``vit`` (ViT-B/16), ``t5``
  (T5-small's shape) at full size, or the same with ``-tiny`` (a few thousand parameters, for the
  CPU interpreter and tests);
* ``hf:ClassName``: a ``transformers`` model class built from its default config;
* ``path/to/file.py:factory``: ``factory(batch=, seq=, dtype=, device=)`` (each keyword
  only if the factory accepts it) returns ``(model, example_inputs)``;
* ``path/to/file.py``: a KernelBench-style file with ``Model``, ``get_inputs`` and
  ``get_init_inputs``.

The zoo's building blocks are small modules of our own (``RMSNorm``, ``SwiGLUMLP``,
``Rotary``, ``SDPA``, ``GELU``, ``CrossEntropy``) so that ``patch.py`` can swap them for
Triton kernels, and each wraps its work in a ``record_function("autokernel::<family>[dims]")``
label so the profiler attributes its kernels to the right op family with the exact
dimensions a starter task needs.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.errors import AutokernelError

DTYPES = ("float32", "bfloat16", "float16")


class ModelError(AutokernelError):
    """A model spec cannot be loaded or run."""


@dataclass
class ModelBundle:
    name: str
    model: Any  # torch.nn.Module
    inputs: tuple  # what model(*inputs) takes; with --train the model returns a loss or an output
    train: bool
    dtype: str
    device: str
    batch: int
    seq: int
    meta: dict = field(default_factory=dict)

    def step(self) -> Any:
        """One profiled step: a forward pass, plus backward of a scalar loss with ``train``."""
        import torch

        if not self.train:
            with torch.no_grad():
                return self.model(*self.inputs)
        out = self.model(*self.inputs)
        loss = scalar_loss(out)
        loss.backward()
        return loss.detach()


def scalar_loss(out: Any):
    """The model's loss if it returns one, else mean of squares of the first float output (a stand-in)."""
    import torch

    if hasattr(out, "loss") and getattr(out, "loss") is not None:
        return out.loss
    if isinstance(out, (tuple, list)):
        out = out[0]
    if hasattr(out, "logits"):
        out = out.logits
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise ModelError("cannot build a training loss: the model returns no floating-point tensor")
    return out if out.dim() == 0 else out.float().pow(2).mean()


def label(family: str, **dims: Any):
    """A profiler range that names the op family and its starter-task dimensions."""
    import torch

    text = ",".join(f"{k}={v}" for k, v in dims.items())
    return torch.profiler.record_function(f"autokernel::{family}[{text}]")


# --------------------------------------------------------------------------- building blocks


def _modules():
    """Define the nn.Module classes lazily, so importing this file needs no torch."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6):
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
            self.eps = eps

        def forward(self, x):
            with label("rmsnorm", M=x.numel() // x.shape[-1], N=x.shape[-1]):
                return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    class LayerNorm(nn.LayerNorm):
        def forward(self, x):
            with label("layernorm", M=x.numel() // x.shape[-1], N=x.shape[-1]):
                return super().forward(x)

    class GELU(nn.Module):
        def __init__(self, approximate: str = "none"):
            super().__init__()
            self.approximate = approximate

        def forward(self, x):
            with label("gelu", M=x.numel() // x.shape[-1], N=x.shape[-1], approximate=self.approximate):
                return F.gelu(x, approximate=self.approximate)

    class SwiGLUMLP(nn.Module):
        """LLaMA MLP: down(silu(gate(x)) * up(x)); the gate product is the swiglu task."""

        def __init__(self, dim: int, hidden: int):
            super().__init__()
            self.gate_proj = nn.Linear(dim, hidden, bias=False)
            self.up_proj = nn.Linear(dim, hidden, bias=False)
            self.down_proj = nn.Linear(hidden, dim, bias=False)

        def gate(self, g, u):
            with label("swiglu", M=g.numel() // g.shape[-1], N=g.shape[-1]):
                return F.silu(g) * u

        def forward(self, x):
            return self.down_proj(self.gate(self.gate_proj(x), self.up_proj(x)))

    class Rotary(nn.Module):
        """Rotary embedding on x[B,S,H,D] with cos/sin[S,D/2], rotating the two halves (LLaMA/NeoX)."""

        def forward(self, x, cos, sin):
            b, s, h, d = x.shape
            with label("rotary", B=b, S=s, H=h, D=d):
                x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
                c, sn = cos[None, :, None, :].float(), sin[None, :, None, :].float()
                return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1).to(x.dtype)

    class SDPA(nn.Module):
        """softmax(q k^T / sqrt(D)) v on q[B,H,S,D], k/v[B,KVH,S,D] (grouped-query when KVH < H)."""

        def __init__(self, causal: bool):
            super().__init__()
            self.causal = causal

        def forward(self, q, k, v):
            b, h, s, d = q.shape
            family = "flash_attention" if self.causal else "attention_bidirectional"
            with label(family, B=b, H=h, KVH=k.shape[1], S=s, D=d):
                if k.shape[1] != h:
                    rep = h // k.shape[1]
                    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
                return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    class CrossEntropy(nn.Module):
        def forward(self, logits, targets):
            logits = logits.reshape(-1, logits.shape[-1])
            with label("cross_entropy", M=logits.shape[0], V=logits.shape[1]):
                return F.cross_entropy(logits, targets.reshape(-1))

    # ---------------------------------------------------------------- GPT-2

    class GPT2Block(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.ln_1, self.ln_2 = LayerNorm(dim), LayerNorm(dim)
            self.c_attn = nn.Linear(dim, 3 * dim)
            self.attn_proj = nn.Linear(dim, dim)
            self.sdpa = SDPA(causal=True)
            self.c_fc = nn.Linear(dim, 4 * dim)
            self.act = GELU("tanh")
            self.mlp_proj = nn.Linear(4 * dim, dim)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=-1)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            y = self.sdpa(q, k, v).transpose(1, 2).reshape(b, s, d)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        def __init__(self, vocab=50257, ctx=1024, dim=768, layers=12, heads=12):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
            self.blocks = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
            self.ln_f = LayerNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            self.loss = CrossEntropy()

        def forward(self, idx, targets=None):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return logits if targets is None else self.loss(logits, targets)

    # ---------------------------------------------------------------- LLaMA

    class LlamaAttention(nn.Module):
        def __init__(self, dim, heads, kv_heads):
            super().__init__()
            self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
            self.q_proj = nn.Linear(dim, dim, bias=False)
            self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.o_proj = nn.Linear(dim, dim, bias=False)
            self.rotary = Rotary()
            self.sdpa = SDPA(causal=True)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q = self.rotary(self.q_proj(x).view(b, s, self.heads, self.head_dim), cos, sin)
            k = self.rotary(self.k_proj(x).view(b, s, self.kv_heads, self.head_dim), cos, sin)
            v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim)
            y = self.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))

    class LlamaBlock(nn.Module):
        def __init__(self, dim, hidden, heads, kv_heads):
            super().__init__()
            self.input_norm, self.post_norm = RMSNorm(dim), RMSNorm(dim)
            self.attn = LlamaAttention(dim, heads, kv_heads)
            self.mlp = SwiGLUMLP(dim, hidden)

        def forward(self, x, cos, sin):
            x = x + self.attn(self.input_norm(x), cos, sin)
            return x + self.mlp(self.post_norm(x))

    class Llama(nn.Module):
        def __init__(self, vocab=32000, dim=4096, hidden=11008, layers=2, heads=32, kv_heads=8,
                     theta=10000.0):
            super().__init__()
            self.head_dim, self.theta = dim // heads, theta
            self.embed = nn.Embedding(vocab, dim)
            self.blocks = nn.ModuleList(LlamaBlock(dim, hidden, heads, kv_heads) for _ in range(layers))
            self.norm = RMSNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.loss = CrossEntropy()

        def rope_tables(self, s, device):
            half = self.head_dim // 2
            inv = 1.0 / (self.theta ** (torch.arange(half, device=device, dtype=torch.float32) / half))
            ang = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
            return ang.cos(), ang.sin()

        def forward(self, idx, targets=None):
            cos, sin = self.rope_tables(idx.shape[1], idx.device)
            x = self.embed(idx)
            for blk in self.blocks:
                x = blk(x, cos, sin)
            logits = self.lm_head(self.norm(x))
            return logits if targets is None else self.loss(logits, targets)

    # ---------------------------------------------------------------- BERT

    class BertLayer(nn.Module):
        def __init__(self, dim, heads, ffn):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.attn_out = nn.Linear(dim, dim)
            self.sdpa = SDPA(causal=False)
            self.ln_attn, self.ln_ffn = LayerNorm(dim, eps=1e-12), LayerNorm(dim, eps=1e-12)
            self.ffn_in, self.act, self.ffn_out = nn.Linear(dim, ffn), GELU("none"), nn.Linear(ffn, dim)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                       for t in self.qkv(x).split(d, dim=-1))
            y = self.sdpa(q, k, v).transpose(1, 2).reshape(b, s, d)
            x = self.ln_attn(x + self.attn_out(y))  # post-LN, as in BERT
            return self.ln_ffn(x + self.ffn_out(self.act(self.ffn_in(x))))

    class Bert(nn.Module):
        def __init__(self, vocab=30522, ctx=512, dim=768, layers=12, heads=12, ffn=3072):
            super().__init__()
            self.tok, self.pos, self.typ = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim), nn.Embedding(2, dim)
            self.ln_emb = LayerNorm(dim, eps=1e-12)
            self.layers = nn.ModuleList(BertLayer(dim, heads, ffn) for _ in range(layers))
            self.mlm_head = nn.Linear(dim, vocab)
            self.loss = CrossEntropy()

        def forward(self, idx, targets=None):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.ln_emb(self.tok(idx) + self.pos(pos) + self.typ(torch.zeros_like(idx)))
            for layer in self.layers:
                x = layer(x)
            if targets is None:
                return x
            return self.loss(self.mlm_head(x), targets)

    # ---------------------------------------------------------------- ResNet (convolutions)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        """ResNet-18's shape (basic blocks, 2 per stage): images in, class logits out."""

        def __init__(self, widths=(64, 128, 256, 512), blocks=2, classes=1000, layers=None):
            super().__init__()
            widths = tuple(widths)[: layers or len(widths)]
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            stages, cin = [], widths[0]
            for i, w in enumerate(widths):
                for j in range(blocks):
                    stages.append(BasicBlock(cin, w, 2 if i and not j else 1))
                    cin = w
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(cin, classes)

        def forward(self, img):
            x = self.stages(self.stem(img))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

        @staticmethod
        def make_inputs(batch, size, g, train):
            return (torch.randn(batch, 3, size, size, generator=g),)

    # ---------------------------------------------------------------- ConvNeXt (depthwise convolutions)

    class ChannelsLayerNorm(nn.Module):
        """ConvNeXt's LayerNorm over the channels of an N-C-H-W map: moved last, normalised, moved back."""

        def __init__(self, dim):
            super().__init__()
            self.norm = LayerNorm(dim, eps=1e-6)

        def forward(self, x):
            return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXtBlock(nn.Module):
        def __init__(self, dim, layer_scale):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = LayerNorm(dim, eps=1e-6)
            self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), GELU("none"), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(layer_scale * torch.ones(dim))

        def forward(self, x):
            y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))  # channels last for the norm and the MLP
            y = self.gamma * self.pwconv2(self.act(self.pwconv1(y)))
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        """ConvNeXt-T's shape: a 4x4 patch stem, stages of depthwise 7x7 blocks (inverted MLP, layer
        scale), a 2x2 strided convolution between stages. The layer scale starts at 0.1, not the paper's
        1e-6, so that the blocks' outputs (and any kernel error in them) show in the model's."""

        def __init__(self, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768), classes=1000, layer_scale=0.1,
                     layers=None):
            super().__init__()
            depths = tuple(depths)[: layers or len(depths)]
            dims = tuple(dims)[: len(depths)]
            self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), ChannelsLayerNorm(dims[0]))
            self.downs = nn.ModuleList(nn.Sequential(ChannelsLayerNorm(a), nn.Conv2d(a, b, 2, 2))
                                       for a, b in zip(dims, dims[1:]))
            self.stages = nn.ModuleList(nn.Sequential(*(ConvNeXtBlock(d, layer_scale) for _ in range(n)))
                                        for d, n in zip(dims, depths))
            self.norm = LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, img):
            x = self.stem(img)
            for i, stage in enumerate(self.stages):
                x = stage(x if i == 0 else self.downs[i - 1](x))
            return self.head(self.norm(x.mean((-2, -1))))

        @staticmethod
        def make_inputs(batch, size, g, train):
            return (torch.randn(batch, 3, size, size, generator=g),)

    # ---------------------------------------------------------------- ViT (bidirectional attention)

    class ViTBlock(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.ln_1, self.ln_2 = LayerNorm(dim, eps=1e-6), LayerNorm(dim, eps=1e-6)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.sdpa = SDPA(causal=False)
            self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), GELU("none"), nn.Linear(4 * dim, dim)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                       for t in self.qkv(self.ln_1(x)).split(d, dim=-1))
            x = x + self.proj(self.sdpa(q, k, v).transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(self.act(self.fc1(self.ln_2(x))))

    class ViT(nn.Module):
        """ViT-B/16's shape: 16x16 patches by a strided convolution, a class token, pre-LN blocks."""

        def __init__(self, image=224, patch=16, dim=768, layers=12, heads=12, classes=1000):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.cls = nn.Parameter(0.02 * torch.randn(1, 1, dim))
            self.pos = nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2 + 1, dim))
            self.blocks = nn.ModuleList(ViTBlock(dim, heads) for _ in range(layers))
            self.ln = LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, classes)

        def forward(self, img):
            x = self.patch(img).flatten(2).transpose(1, 2)
            x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos[:, : x.shape[1] + 1]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x[:, 0]))

        @staticmethod
        def make_inputs(batch, size, g, train):
            return (torch.randn(batch, 3, size, size, generator=g),)

    # ---------------------------------------------------------------- T5 (encoder-decoder)

    class T5Attention(nn.Module):
        def __init__(self, dim, heads, causal):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
            self.sdpa = SDPA(causal=causal)

        def forward(self, x, memory=None):
            src = x if memory is None else memory
            b, s, d = x.shape
            split = lambda t: t.view(b, t.shape[1], self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            y = self.sdpa(split(self.q(x)), split(self.k(src)), split(self.v(src)))
            return self.o(y.transpose(1, 2).reshape(b, s, d))

    class T5FF(nn.Module):
        def __init__(self, dim, ffn):
            super().__init__()
            self.wi, self.wo = nn.Linear(dim, ffn, bias=False), nn.Linear(ffn, dim, bias=False)

        def forward(self, x):
            return self.wo(F.relu(self.wi(x)))

    class T5Layer(nn.Module):
        def __init__(self, dim, heads, ffn, decoder):
            super().__init__()
            self.norm_self, self.norm_ff = RMSNorm(dim), RMSNorm(dim)
            self.self_attn = T5Attention(dim, heads, causal=decoder)
            self.cross = T5Attention(dim, heads, causal=False) if decoder else None
            self.norm_cross = RMSNorm(dim) if decoder else None
            self.ff = T5FF(dim, ffn)

        def forward(self, x, memory=None):
            x = x + self.self_attn(self.norm_self(x))
            if self.cross is not None:
                x = x + self.cross(self.norm_cross(x), memory)
            return x + self.ff(self.norm_ff(x))

    class T5(nn.Module):
        """T5-small's shape (RMSNorm, ReLU feed-forward, no biases); learned absolute positions stand in
        for T5's relative position buckets. Source and target tokens in, target logits out."""

        def __init__(self, vocab=32128, dim=512, layers=6, heads=8, ffn=2048, ctx=1024):
            super().__init__()
            self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
            self.encoder = nn.ModuleList(T5Layer(dim, heads, ffn, decoder=False) for _ in range(layers))
            self.decoder = nn.ModuleList(T5Layer(dim, heads, ffn, decoder=True) for _ in range(layers))
            self.enc_norm, self.dec_norm = RMSNorm(dim), RMSNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.loss = CrossEntropy()

        def forward(self, src, tgt, targets=None):
            x = self.embed(src) + self.pos(torch.arange(src.shape[1], device=src.device))
            for layer in self.encoder:
                x = layer(x)
            memory = self.enc_norm(x)
            y = self.embed(tgt) + self.pos(torch.arange(tgt.shape[1], device=tgt.device))
            for layer in self.decoder:
                y = layer(y, memory)
            logits = self.lm_head(self.dec_norm(y))
            return logits if targets is None else self.loss(logits, targets)

    return {"GPT2": GPT2, "Llama": Llama, "Bert": Bert, "ResNet": ResNet, "ViT": ViT, "T5": T5, "ConvNeXt": ConvNeXt}


# name -> (class, constructor kwargs, default (batch, seq) on a GPU, on the CPU)
ZOO: dict[str, tuple[str, dict, tuple[int, int], tuple[int, int]]] = {
    "gpt2": ("GPT2", {}, (8, 1024), (1, 128)),
    "llama": ("Llama", {}, (1, 4096), (1, 64)),
    "bert": ("Bert", {}, (8, 512), (1, 128)),
    "gpt2-tiny": ("GPT2", dict(vocab=97, ctx=64, dim=32, layers=2, heads=2), (2, 16), (2, 16)),
    "llama-tiny": ("Llama", dict(vocab=97, dim=64, hidden=96, layers=2, heads=4, kv_heads=2), (2, 16), (2, 16)),
    "bert-tiny": ("Bert", dict(vocab=97, ctx=64, dim=32, layers=2, heads=2, ffn=64), (2, 16), (2, 16)),
    # Neither GPT-2 nor LLaMA (issue 19): convolutions, bidirectional attention, an encoder-decoder.
    # For the image models "seq" is the image side.
    "resnet": ("ResNet", {}, (32, 224), (1, 64)),
    "vit": ("ViT", {}, (32, 224), (1, 64)),
    "convnext": ("ConvNeXt", {}, (32, 224), (1, 64)),
    "t5": ("T5", {}, (8, 512), (1, 64)),
    "resnet-tiny": ("ResNet", dict(widths=(4, 8), blocks=1, classes=10), (2, 16), (2, 16)),
    "vit-tiny": ("ViT", dict(image=16, patch=4, dim=32, layers=2, heads=2, classes=10), (2, 16), (2, 16)),
    "convnext-tiny": ("ConvNeXt", dict(depths=(1, 1), dims=(8, 16), classes=10), (2, 16), (2, 16)),
    "t5-tiny": ("T5", dict(vocab=97, dim=32, layers=1, heads=2, ffn=64, ctx=64), (2, 16), (2, 16)),
}


def zoo_names() -> list[str]:
    return sorted(ZOO)


def resolve_device(device: str) -> str:
    import torch

    if device in ("auto", "", None):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for but no CUDA GPU is visible")
    return device


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ModelError(f"dtype must be one of {', '.join(DTYPES)}, not {name!r}")
    return getattr(torch, name)


def load_model(spec: str, batch: int | None = None, seq: int | None = None, dtype: str = "bfloat16",
               device: str = "auto", train: bool = False, layers: int | None = None, seed: int = 0,
               loss: bool = False) -> ModelBundle:
    """Build the model named by ``spec`` with random weights, and example inputs for it. ``loss``: in
    inference, the inputs a training step takes (a language model's targets too), so the forward
    returns its loss: an evaluation pass."""
    import torch

    device = resolve_device(device)
    tdtype = torch_dtype(dtype)
    torch.manual_seed(seed)
    if loss and not train and spec not in ZOO:
        raise ModelError(f"{spec}: an evaluation pass with its loss is for the zoo's models "
                         f"({', '.join(zoo_names())}); yours: --train, or a model that returns its loss")
    try:
        if spec in ZOO:
            bundle = _zoo(spec, batch, seq, device, train or loss, layers)
        elif spec.startswith("hf:"):
            bundle = _hf(spec[3:], batch or 2, seq or 128, device, train)
        else:
            bundle = _user_file(spec, batch, seq, dtype, device, train)
    except AutokernelError:
        raise
    except Exception as exc:  # a user's model raising anything: one line, not a traceback wall
        raise ModelError(f"cannot build model {spec!r}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    model = bundle.model.to(device=device)
    if dtype != "float32":
        model = model.to(dtype=tdtype)
    model.train(train)
    bundle.model = model
    bundle.inputs = tuple(_cast(x, tdtype, device) for x in bundle.inputs)
    bundle.dtype, bundle.device, bundle.train = dtype, device, train
    return bundle


def _cast(x: Any, dtype, device: str) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(dtype) if x.is_floating_point() else x
    return x


def _zoo(name, batch, seq, device, train, layers) -> ModelBundle:
    import torch

    cls_name, kwargs, gpu_default, cpu_default = ZOO[name]
    b, s = gpu_default if device.startswith("cuda") else cpu_default
    batch, seq = batch or b, seq or s
    kwargs = dict(kwargs)
    if layers is not None:
        kwargs["layers"] = layers
    with torch.device(device):  # initialise on the device: seconds saved on a 7B-layer model
        model = _modules()[cls_name](**kwargs)
    g = torch.Generator().manual_seed(1234)
    if hasattr(model, "make_inputs"):  # an image model: "seq" is the image's side
        inputs = model.make_inputs(batch, seq, g, train)
        return ModelBundle(name, model, inputs, train, "", device, batch, seq, {"kind": "zoo", **kwargs})
    vocab = model.lm_head.weight.shape[0] if hasattr(model, "lm_head") else model.mlm_head.weight.shape[0]
    positions = getattr(model, "wpe", None) or getattr(model, "pos", None)  # LLaMA has RoPE: no limit
    ctx = positions.weight.shape[0] if positions is not None else seq
    if seq > ctx:
        raise ModelError(f"{name}: --seq {seq} exceeds the model's context of {ctx}")
    idx = torch.randint(0, vocab, (batch, seq), generator=g)
    if hasattr(model, "decoder"):  # encoder-decoder: source and target tokens of the same length
        idx = (idx, torch.randint(0, vocab, (batch, seq), generator=g))
    else:
        idx = (idx,)
    inputs = idx + ((torch.randint(0, vocab, (batch, seq), generator=g),) if train else ())
    return ModelBundle(name, model, inputs, train, "", device, batch, seq, {"kind": "zoo", **kwargs})


def _hf(class_name, batch, seq, device, train) -> ModelBundle:
    import torch

    try:
        import transformers
    except ImportError:
        raise ModelError("hf: models need the transformers package (pip install transformers)") from None
    cls = getattr(transformers, class_name, None)
    if cls is None or not hasattr(cls, "config_class"):
        raise ModelError(f"transformers has no model class {class_name!r}")
    config = cls.config_class()
    model = cls(config)
    vocab = getattr(config, "vocab_size", 1000)
    idx = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1234))
    inputs = (idx,)
    if train:
        model.forward = _with_labels(model.forward, idx)
    return ModelBundle(f"hf:{class_name}", model, inputs, train, "", device, batch, seq, {"kind": "hf"})


def _with_labels(forward: Callable, labels) -> Callable:
    def fwd(input_ids, **kw):
        return forward(input_ids=input_ids, labels=labels.to(input_ids.device), **kw)
    return fwd


def _load_file(path: Path):
    if not path.is_file():
        raise ModelError(f"no such model file: {path}")
    name = f"autokernel_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ModelError(f"{path}: import failed: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    return module


def _user_file(spec: str, batch, seq, dtype, device, train) -> ModelBundle:
    path_text, _, factory = spec.rpartition(":") if spec.count(":") and not spec.endswith(".py") else (spec, "", "")
    if not path_text.endswith(".py"):
        raise ModelError(f"unknown model {spec!r}: use one of {', '.join(zoo_names())}, hf:ClassName, "
                         "path/to/file.py:factory or a KernelBench-style path/to/file.py")
    module = _load_file(Path(path_text))
    if factory:
        fn = getattr(module, factory, None)
        if not callable(fn):
            raise ModelError(f"{path_text} has no callable {factory!r}")
        offered = dict(batch=batch, seq=seq, dtype=dtype, device=device)
        params = inspect.signature(fn).parameters
        kwargs = {k: v for k, v in offered.items() if k in params and v is not None}
        result = fn(**kwargs)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ModelError(f"{spec}: the factory must return (model, example_inputs)")
        model, inputs = result
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        return ModelBundle(spec, model, inputs, train, "", device, batch or 0, seq or 0, {"kind": "factory"})
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise ModelError(f"{path_text}: a KernelBench-style file needs Model, get_inputs and get_init_inputs "
                             f"(missing {attr}); or name a factory: {path_text}:make_model")
    model = module.Model(*module.get_init_inputs())
    return ModelBundle(spec, model, tuple(module.get_inputs()), train, "", device, 0, 0, {"kind": "kernelbench"})


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def describe(bundle: ModelBundle) -> str:
    n = param_count(bundle.model)
    size = f"{n / 1e6:.1f}M params" if n >= 1e5 else f"{n} params"
    shape = f"batch {bundle.batch} x seq {bundle.seq}, " if bundle.batch else ""
    mode = "training step (forward + backward)" if bundle.train else "inference (forward)"
    return f"{bundle.name}: {size}, {shape}{bundle.dtype}, {mode} on {bundle.device}"

