"""Static rules for a candidate kernel.py, checked on its AST before it is imported.

The runtime guards (guards.py) catch what slips through; these rules give a clear
one-line reason early and close doors the runtime cannot watch (threads, raw
memory, the interpreter's own machinery).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# `os` only to ask whether Triton runs interpreted: os.environ.get("TRITON_INTERPRET") / os.environ["TRITON_INTERPRET"].
INTERPRET_VAR = "TRITON_INTERPRET"
ALLOWED_IMPORTS = {
    "torch", "triton", "math", "typing", "functools", "itertools", "dataclasses", "__future__",
    "collections", "enum",
}
# torch.<name> a kernel may use: allocation, dtypes, metadata. Everything else in the
# torch namespace computes, and the work must be done in Triton.
TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "tensor", "Tensor", "Size", "device", "dtype", "finfo", "iinfo", "is_tensor", "is_floating_point",
    "float16", "bfloat16", "float32", "float64", "half", "float", "double", "int8", "int16", "int32", "int64",
    "uint8", "bool", "long", "int", "float8_e4m3fn", "float8_e5m2", "cuda", "promote_types", "result_type",
    "get_default_dtype", "no_grad", "inference_mode",
}
TORCH_CUDA_ALLOWED = {"current_device", "get_device_properties", "get_device_capability", "is_available",
                      "device_count", "device"}
TORCH_SUBMODULES_FORBIDDEN = {"nn", "ops", "linalg", "fft", "special", "sparse", "jit", "compile", "library",
                              "utils", "backends", "autograd", "multiprocessing", "distributed", "testing",
                              "fx", "export", "func", "_dynamo", "_inductor", "_C", "cpu", "mps", "xpu"}
FORBIDDEN_NAMES = {
    "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "breakpoint", "input", "memoryview", "exit", "quit", "SystemExit", "KeyboardInterrupt",
    "BaseException", "__builtins__", "__loader__", "__spec__", "type", "object", "super", "help", "dir", "id",
}
# Attribute names that hand out raw memory, host copies, streams, graphs or tensor internals.
FORBIDDEN_ATTRS = {
    "numpy", "tolist", "untyped_storage", "storage", "set_", "Stream", "stream", "ExternalStream",
    "set_stream", "current_stream", "default_stream", "Event", "graph", "CUDAGraph", "graphs",
    "caching_allocator_alloc", "caching_allocator_delete", "synchronize", "record_stream", "pin_memory",
    "share_memory_", "register_hook", "as_subclass", "make_subclass", "testing", "do_bench", "runtime", "knobs",
    # string-driven attribute access and evaluation, which the AST cannot see through
    "get_type_hints", "ForwardRef", "attrgetter", "methodcaller", "format_map",
}


@dataclass(frozen=True)
class StaticViolation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}, " if self.line else ""
        return f"{self.message} ({where}rule: {self.rule})"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[StaticViolation] = []
        self.torch_aliases = {"torch"}
        self.kernel_fn_defined = False

    def fail(self, node: ast.AST, rule: str, message: str) -> None:
        self.violations.append(StaticViolation(rule, getattr(node, "lineno", 0), message))

    # Imports -----------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        if module == "os" and isinstance(node, ast.Import):
            return  # every use is checked in check_source (_os_uses_ok)
        if root not in ALLOWED_IMPORTS:
            self.fail(node, "imports", f"import of '{module}' is not allowed (only torch, triton, math, typing, "
                                       "functools, itertools, dataclasses, collections, enum)")
        elif root == "torch" and module != "torch":
            self.fail(node, "torch-compute", f"import of '{module}' is not allowed: the work must be done in Triton")
        elif root == "triton" and any(p in ("testing", "runtime", "backends", "compiler", "knobs")
                                      for p in module.split(".")[1:]):
            self.fail(node, "harness-tamper", f"import of '{module}' is not allowed")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "os" and alias.asname:
                self.fail(node, "imports", "'import os as ...' is not allowed")
            self._check_module(node, alias.name)
            if alias.name == "torch" and alias.asname:
                self.torch_aliases.add(alias.asname)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.fail(node, "imports", "relative imports are not allowed")
            return
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            if alias.name == "*":
                self.fail(node, "imports", f"'from {module} import *' is not allowed")
            elif module == "torch" and alias.name not in TORCH_ALLOWED:
                self.fail(node, "torch-compute", f"'from torch import {alias.name}' is not allowed")
            elif alias.name in FORBIDDEN_ATTRS or alias.name.startswith("_"):
                self.fail(node, "harness-tamper", f"importing '{alias.name}' is not allowed")
        self.generic_visit(node)

    # Control flow and names ----------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.fail(node, "try-except", "try/except is not allowed (no silent fallback to another implementation)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        self.fail(node, "context-manager", "'with' blocks are not allowed in kernel.py")
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_AsyncFunctionDef(self, node: ast.AST) -> None:
        self.fail(node, "async", "async code is not allowed")

    def visit_Global(self, node: ast.Global) -> None:
        self.fail(node, "state", "'global' is not allowed (no state carried across calls)")

    visit_Nonlocal = visit_Global

    def _check_targets(self, node: ast.AST, targets: list[ast.AST]) -> None:
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute):
                    self.fail(node, "attribute-assignment", "assigning to an attribute is not allowed "
                                                            "(no patching of modules or objects)")
                    return

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_targets(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_targets(node, [node.target])
        self.generic_visit(node)

    visit_AnnAssign = visit_AugAssign

    def visit_Delete(self, node: ast.Delete) -> None:
        self._check_targets(node, node.targets)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.bases or node.keywords:
            self.fail(node, "tensor-subclass", f"class '{node.name}' may not inherit (no tensor subclasses)")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "kernel_fn":
            self.kernel_fn_defined = True
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self.fail(node, "builtins", f"'{node.id}' is not allowed in kernel.py")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name.startswith("_"):
            self.fail(node, "private-attribute", f"private attribute '.{name}' is not allowed")
        elif name in FORBIDDEN_ATTRS:
            self.fail(node, "forbidden-attribute", f"'.{name}' is not allowed in kernel.py")
        else:
            dotted = _dotted(node)
            if dotted:
                parts = dotted.split(".")
                if parts[0] in self.torch_aliases and len(parts) >= 2:
                    self._check_torch(node, parts)
        self.generic_visit(node)

    def _check_torch(self, node: ast.AST, parts: list[str]) -> None:
        head = parts[1]
        if head in TORCH_SUBMODULES_FORBIDDEN:
            self.fail(node, "torch-compute", f"'torch.{head}' is not allowed: the work must be done in Triton")
        elif head not in TORCH_ALLOWED:
            self.fail(node, "torch-compute", f"'torch.{head}' is a PyTorch compute op: do the work in Triton")
        elif head == "cuda" and len(parts) >= 3 and parts[2] not in TORCH_CUDA_ALLOWED:
            self.fail(node, "forbidden-attribute", f"'torch.cuda.{parts[2]}' is not allowed in kernel.py")


def _os_violations(tree: ast.AST) -> list[StaticViolation]:
    """Each use of the name ``os`` must read TRITON_INTERPRET from os.environ, nothing else."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == "os") or isinstance(parents.get(node), ast.alias):
            continue
        env = parents.get(node)
        use = parents.get(env)
        ok = isinstance(env, ast.Attribute) and env.attr == "environ" and isinstance(node.ctx, ast.Load)
        if ok and isinstance(use, ast.Subscript):
            ok = isinstance(use.slice, ast.Constant) and use.slice.value == INTERPRET_VAR
        elif ok and isinstance(use, ast.Attribute) and use.attr == "get":
            call = parents.get(use)
            ok = (isinstance(call, ast.Call) and bool(call.args) and isinstance(call.args[0], ast.Constant)
                  and call.args[0].value == INTERPRET_VAR)
        else:
            ok = False
        if not ok:
            out.append(StaticViolation("imports", getattr(node, "lineno", 0),
                                       f"'os' may only read os.environ.get('{INTERPRET_VAR}')"))
    return out


def check_source(source: str, filename: str = "kernel.py") -> list[StaticViolation]:
    """All rule violations in ``source``; a syntax error is one violation."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [StaticViolation("syntax", exc.lineno or 0, f"syntax error: {exc.msg}")]
    checker = _Checker()
    checker.visit(tree)
    checker.violations.extend(_os_violations(tree))
    if not checker.kernel_fn_defined and not checker.violations:
        checker.violations.append(StaticViolation("kernel_fn", 0, "kernel.py defines no function 'kernel_fn'"))
    return checker.violations
