"""Triton kernels found by autokernel-tui, packaged to patch a PyTorch model.

    import autokernel_kernels
    autokernel_kernels.patch(model)      # replaces the modules each kernel implements, in place

Needs only torch and triton. Without a GPU, kernels run in Triton's interpreter
(set TRITON_INTERPRET=1 before importing triton): correct, but slow.
"""

from pathlib import Path

from . import _patch

KERNELS = {'cross_entropy': 'kernels/cross_entropy.py', 'flash_attention': 'kernels/flash_attention.py', 'gelu': 'kernels/gelu.py', 'layernorm': 'kernels/layernorm.py', 'rmsnorm': 'kernels/rmsnorm.py', 'rotary': 'kernels/rotary.py', 'softmax': 'kernels/softmax.py', 'swiglu': 'kernels/swiglu.py'}  # task/family -> file in this package
_HERE = Path(__file__).resolve().parent


def patch(model, families=None):
    """Put the kernels into ``model`` (in place); returns {family: modules replaced}."""
    _patch.use_interpreter_if_no_gpu(next((p.device.type for p in model.parameters()), "auto"))
    fns = _patch.load_kernels({f: _HERE / rel for f, rel in KERNELS.items()})
    return _patch.patch_model(model, fns, families)


def unpatch(model):
    _patch.unpatch_model(model)
