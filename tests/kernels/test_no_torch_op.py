"""Static guard: a task's kernel.py host code may allocate and reshape, never compute
with PyTorch. Code inside @triton.jit functions is Triton and is not scanned (torch
cannot run there). The harness adds a runtime check; this one needs no GPU and no run."""

import ast
from pathlib import Path

import pytest

from autokernel_tui.tasks.spec import find_tasks

REPO = Path(__file__).resolve().parents[2]
TASKS = find_tasks(REPO / "kernels")

# torch.<name>(...) calls a kernel's host code may make: allocation, metadata, dtypes.
ALLOWED_TORCH_CALLS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like",
    "device", "finfo", "iinfo", "Size", "is_tensor", "is_floating_point",
    "get_default_dtype", "cuda.current_device", "cuda.device", "cuda.is_available",
    "cuda.get_device_capability", "cuda.get_device_properties",
}
# Tensor methods that compute (or copy into a new precision); views and metadata are fine.
COMPUTE_METHODS = {
    "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "baddbmm", "mv", "dot", "einsum", "linear",
    "sum", "mean", "var", "std", "var_mean", "norm", "max", "min", "amax", "amin", "argmax", "logsumexp",
    "cumsum", "prod", "exp", "exp2", "log", "sqrt", "rsqrt", "pow", "square", "abs", "neg", "reciprocal",
    "tanh", "sigmoid", "erf", "gelu", "silu", "relu", "clamp", "where", "masked_fill",
    "add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "addcmul", "lerp", "copy_", "clone",
    "float", "half", "bfloat16", "double", "to", "type", "cos", "sin", "rms_norm", "layer_norm",
    "cross_entropy", "nll_loss", "scaled_dot_product_attention", "rotary", "gather", "index_select",
    "fill_", "zero_", "cpu", "cuda", "numpy", "tolist", "item",
}
# Side channels a kernel file has no business with (background work the timer misses, native code).
FORBIDDEN_STDLIB = ("threading", "concurrent", "multiprocessing", "asyncio", "subprocess", "ctypes", "numpy")
FORBIDDEN_MODULES = ("torch.nn", "torch.ops", "torch._C", "torch.compile", "torch.library", "torch.autograd",
                     "torch.cuda.Stream", "torch.cuda.stream", "torch.func", "torch._dynamo", "torch._inductor")


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if _dotted(target).split(".")[-1] in ("jit", "autotune", "heuristics"):
            return True
    return False


def host_violations(source: str) -> list[str]:
    """Every PyTorch compute use outside @triton.jit code, one line each."""
    tree = ast.parse(source)
    jit_nodes = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and _is_jit(fn):
            jit_nodes.update(id(n) for n in ast.walk(fn))
    torch_aliases, fn_aliases, problems = {"torch"}, set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(FORBIDDEN_MODULES) or a.name.split(".")[0] in FORBIDDEN_STDLIB:
                    problems.append(f"line {node.lineno}: imports {a.name}")
                if a.name == "torch":
                    torch_aliases.add(a.asname or "torch")
        elif isinstance(node, ast.ImportFrom) and node.module:
            full = [f"{node.module}.{a.name}" for a in node.names]
            if node.module.startswith(FORBIDDEN_MODULES) or any(f.startswith(FORBIDDEN_MODULES) for f in full) \
                    or node.module.split(".")[0] in FORBIDDEN_STDLIB:
                problems.append(f"line {node.lineno}: imports from {node.module}")
            elif node.module == "torch":
                fn_aliases.update(a.asname or a.name for a in node.names if a.name not in ("Tensor", "dtype"))
        if id(node) in jit_nodes:
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            problems.append(f"line {node.lineno}: uses the @ operator")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        head, _, rest = name.partition(".")
        if head in torch_aliases and rest:
            if rest.startswith(tuple(m.split(".", 1)[1] for m in FORBIDDEN_MODULES)) or rest not in ALLOWED_TORCH_CALLS:
                problems.append(f"line {node.lineno}: calls torch.{rest}")
        elif name in fn_aliases:
            problems.append(f"line {node.lineno}: calls {name} (imported from torch)")
        elif head == "F":
            problems.append(f"line {node.lineno}: calls {name}")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in COMPUTE_METHODS \
                and head not in ("tl", "triton", "math", "os", "sys"):
            problems.append(f"line {node.lineno}: calls .{node.func.attr}() on {name.rsplit('.', 1)[0] or 'a value'}")
    return problems


@pytest.mark.parametrize("spec", TASKS, ids=[s.name for s in TASKS])
def test_kernel_host_code_does_no_torch_compute(spec):
    problems = host_violations(spec.kernel_path.read_text(encoding="utf-8"))
    assert problems == [], f"{spec.name}/kernel.py computes with PyTorch: " + "; ".join(problems)


@pytest.mark.parametrize("snippet,what", [
    ("import torch\ndef kernel_fn(x):\n    return torch.softmax(x, -1)\n", "torch.softmax"),
    ("import torch.nn.functional as F\ndef kernel_fn(x, w, e):\n    return F.rms_norm(x, (4,), w, e)\n", "torch.nn"),
    ("import torch\ndef kernel_fn(a, b):\n    return a @ b\n", "@ operator"),
    ("import torch\ndef kernel_fn(x):\n    return x.float().softmax(-1).to(x.dtype)\n", ".softmax()"),
    ("import torch\ndef kernel_fn(x):\n    try:\n        return launch(x)\n    except Exception:\n"
     "        return torch.nn.functional.gelu(x)\n", "torch.nn.functional.gelu"),
    ("from torch import matmul\ndef kernel_fn(a, b):\n    return matmul(a, b)\n", "matmul"),
    ("import torch\ndef kernel_fn(x):\n    y = torch.empty_like(x)\n    y.copy_(x)\n    return y\n", ".copy_()"),
    ("import torch as T\ndef kernel_fn(x):\n    return T.exp(x)\n", "torch.exp"),
    ("import threading\ndef kernel_fn(x):\n    return x\n", "threading"),
    ("from concurrent.futures import ThreadPoolExecutor\ndef kernel_fn(x):\n    return x\n", "concurrent"),
])
def test_scanner_catches(snippet, what):
    problems = host_violations(snippet)
    assert any(what in p for p in problems), problems


def test_scanner_allows_allocation_views_and_triton():
    src = (
        "import torch, triton\nimport triton.language as tl\n"
        "@triton.jit\ndef _k(X, Y, N, B: tl.constexpr):\n"
        "    x = tl.load(X + tl.arange(0, B)).to(tl.float32)\n    tl.store(Y + tl.arange(0, B), tl.exp(x))\n"
        "def kernel_fn(x):\n    x2 = x.reshape(-1, x.shape[-1]).contiguous()\n"
        "    y = torch.empty((x2.shape[0], x2.shape[1]), dtype=x.dtype, device=x.device)\n"
        "    _k[(triton.cdiv(x2.numel(), 1024),)](x2, y, x2.numel(), B=1024, num_warps=4)\n"
        "    return y.view(x.shape)\n"
    )
    assert host_violations(src) == []


@pytest.mark.parametrize("spec", TASKS, ids=[s.name for s in TASKS])
def test_kernel_passes_the_harness_static_rules(spec):
    # The harness rejects a candidate on these rules before importing it: a starter must pass them.
    from autokernel_tui.harness.static_check import check_source

    problems = check_source(spec.kernel_path.read_text(encoding="utf-8"), str(spec.kernel_path))
    assert problems == [], f"{spec.name}/kernel.py breaks static rules: {problems}"


OWN_TASKS = ("matmul", "softmax", "layernorm", "rmsnorm", "add_rmsnorm")


@pytest.mark.parametrize("name", OWN_TASKS)
def test_kernel_imports_neither_os_nor_sys(name):
    # The interpreter is told by the tensor's device, not the environment.
    tree = ast.parse((REPO / "kernels" / name / "kernel.py").read_text(encoding="utf-8"))
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not roots & {"os", "sys"}, f"{name}/kernel.py imports {sorted(roots & {'os', 'sys'})}"
