"""Harness-owned PyTorch side of the matmul task (read-only to the agent)."""

import math

import torch


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    # Activations with a per-row scale spread times a weight of fan-in scale, so outputs are O(1).
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    a = (torch.randn(m, k, generator=g, device=device) * scale).to(device=device, dtype=dtype)
    b = (torch.randn(k, n, generator=g, device=device) / math.sqrt(k)).to(device=device, dtype=dtype)
    bias, activation = _epilogue(shape)
    if not bias:
        return a, b
    # O(1) like the products: a kernel that drops or misplaces the bias fails by far
    bias = torch.randn(n, generator=g, device=device).to(dtype)
    return (a, b, bias) if activation == "none" else (a, b, bias, activation)


EPILOGUES = {"none": (False, "none"), "bias": (True, "none"), "bias+gelu": (True, "gelu"),
             "bias+gelu_tanh": (True, "gelu_tanh")}


def _epilogue(shape: dict) -> tuple[bool, str]:
    """A shape's ``epilogue``: (a bias?, the activation after it). "bias" is a Linear's (C = A @ B + bias,
    one value per column); "bias+gelu" / "bias+gelu_tanh" a Linear followed by a GELU (GPT-2's MLP: tanh)."""
    epilogue = shape.get("epilogue", "none")
    if epilogue not in EPILOGUES:
        raise ValueError(f"matmul's epilogue is one of {', '.join(EPILOGUES)}, not {epilogue!r}")
    return EPILOGUES[epilogue]


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
              activation: str = "none") -> torch.Tensor:
    """The baseline: torch.matmul, or with a bias addmm (cuBLAS, the bias in its epilogue, as nn.Linear
    calls it), then the activation as its own op (F.gelu); fp32 with torch's default allow_tf32=False."""
    out = torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b)
    if activation == "none":
        return out
    return torch.nn.functional.gelu(out, approximate="tanh" if activation == "gelu_tanh" else "none")


def flops(shape: dict) -> int:
    return 2 * shape["M"] * shape["N"] * shape["K"] + (shape["M"] * shape["N"] if _epilogue(shape)[0] else 0)


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return (m * k + k * n + m * n + (n if _epilogue(shape)[0] else 0)) * (torch.finfo(dtype).bits // 8)


def _positive(inputs, g):
    # All-positive operands: sums grow with K, so accumulating in the input dtype loses digits.
    a, b, *rest = inputs
    return a.abs(), b.abs(), *rest


def _row_scales(inputs, g):
    # Rows of A spanning four decades: small rows must not drown in the large rows' rounding.
    a, b, *rest = inputs
    s = torch.pow(10.0, torch.rand(a.shape[0], 1, generator=g, device=g.device) * 4.0 - 2.0).to(a.device)
    return (a.float() * s).to(a.dtype), b, *rest


def _weight_layout(inputs, g):
    # B as a model passes it: nn.Linear computes x @ W.t(), so B is the transpose of a row-major [N, K]
    # weight (column-major, strides (1, K)). Same values, the layout every patched Linear calls with.
    a, b, *rest = inputs
    return a, b.t().contiguous().t(), *rest


def _new_bias(a, b, g):
    # large, so dropping it fails by far
    return (torch.randn(b.shape[1], generator=g, device=g.device) * 4.0).to(device=a.device, dtype=a.dtype)


# The patched nn.Linear hands the kernel its bias, and the GELU after it where one follows (patch.py):
# a kept kernel must do each right even where the task's shapes have neither.
def _bias(inputs, g):
    a, b, *rest = inputs
    return a, b, _new_bias(a, b, g), *rest[1:]


def _bias_then(activation: str):
    def transform(inputs, g):
        a, b, *_ = inputs
        return a, b, _new_bias(a, b, g), activation
    return transform


ADVERSARIAL = {"positive": _positive, "row_scales": _row_scales, "weight_layout": _weight_layout, "bias": _bias,
               "bias_gelu": _bias_then("gelu"), "bias_gelu_tanh": _bias_then("gelu_tanh")}
