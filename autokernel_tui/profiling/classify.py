"""Kernel name (+ the ops that launched it) -> op family.

Order of evidence, strongest first:

1. a zoo/patch label ``autokernel::<family>[dims]`` among the ancestors;
2. the outermost recognised op among the ancestors (``aten::cross_entropy_loss`` over its
   ``log_softmax``; ``aten::linear`` over ``addmm``; an autograd node ``NativeLayerNormBackward0``
   for backward kernels);
3. the kernel name itself (cuBLAS ``nvjet_*``/``sm90_xmma_gemm_*``, CUTLASS, cuDNN, flash,
   Triton/inductor fused names, elementwise and reduction templates, memcpy).

Kernels launched from backward passes get ``<family>_backward``, matmul's too (its gradients are
matmuls, but of the forward's chain: ``init`` makes generated backward tasks of those chains, and
the ranking counts them with the forward). Nothing is dropped: what no rule recognises is
``other``, and the profile table shows it.
"""

from __future__ import annotations

import re

OTHER = "other"
LABEL_PREFIX = "autokernel::"
# Families whose starter task has the same name.
STARTER_FAMILIES = ("matmul", "flash_attention", "softmax", "layernorm", "rmsnorm", "add_rmsnorm",
                    "gelu", "swiglu", "cross_entropy", "rotary")
GENERIC = ("elementwise", "reduction", "copy", "embedding", "overhead", OTHER)
# A training step's gradient matmuls are matmuls too, of their own M, N, K (dims and FLOP floors).
MATMUL_FAMILIES = ("matmul", "matmul_backward")

# Exact aten op names -> family.
ATEN_FAMILY = {
    **dict.fromkeys(["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                     "aten::addmv", "aten::mv", "aten::dot", "aten::_addmm_activation", "aten::_scaled_mm",
                     "aten::einsum"], "matmul"),
    **dict.fromkeys(["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                     "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                     "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
                     "aten::_scaled_dot_product_flash_attention_for_cpu"], "attention"),
    **dict.fromkeys(["aten::softmax", "aten::_softmax", "aten::_safe_softmax"], "softmax"),
    **dict.fromkeys(["aten::layer_norm", "aten::native_layer_norm"], "layernorm"),
    **dict.fromkeys(["aten::rms_norm", "aten::_fused_rms_norm"], "rmsnorm"),
    # GroupNorm is not LayerNorm (its CUDA kernels share names with layer_norm's: RowwiseMoments...):
    # the op decides, so it never lands on the layernorm starter.
    **dict.fromkeys(["aten::group_norm", "aten::native_group_norm"], "group_norm"),
    **dict.fromkeys(["aten::batch_norm", "aten::native_batch_norm", "aten::_batch_norm_impl_index",
                     "aten::_native_batch_norm_legit_no_training", "aten::_native_batch_norm_legit",
                     "aten::cudnn_batch_norm", "aten::instance_norm"], "batch_norm"),
    **dict.fromkeys(["aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
                     "aten::cudnn_convolution", "aten::mkldnn_convolution", "aten::conv_transpose1d",
                     "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::_slow_conv2d_forward",
                     "aten::cudnn_convolution_relu", "aten::cudnn_convolution_add_relu"], "conv"),
    **dict.fromkeys(["aten::gelu", "aten::gelu_"], "gelu"),
    **dict.fromkeys(["aten::silu", "aten::silu_"], "swiglu"),
    **dict.fromkeys(["aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss_forward",
                     "aten::log_softmax", "aten::_log_softmax"], "cross_entropy"),
    **dict.fromkeys(["aten::embedding", "aten::index_select", "aten::embedding_dense_backward",
                     "aten::embedding_backward"], "embedding"),
    **dict.fromkeys(["aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone",
                     "aten::fill_", "aten::zero_", "aten::zeros", "aten::zeros_like", "aten::ones_like",
                     "aten::cat", "aten::repeat_interleave", "aten::expand", "aten::index"], "copy"),
    **dict.fromkeys(["aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::min", "aten::argmax",
                     "aten::var", "aten::std", "aten::norm", "aten::linalg_vector_norm", "aten::var_mean",
                     "aten::cumsum", "aten::prod", "aten::all", "aten::any"], "reduction"),
    **dict.fromkeys(["aten::_log_softmax_backward_data", "aten::nll_loss_backward"], "cross_entropy_backward"),
    **dict.fromkeys(["aten::_softmax_backward_data"], "softmax_backward"),
    **dict.fromkeys(["aten::native_layer_norm_backward"], "layernorm_backward"),
    **dict.fromkeys(["aten::_fused_rms_norm_backward"], "rmsnorm_backward"),
    **dict.fromkeys(["aten::gelu_backward"], "gelu_backward"),
    **dict.fromkeys(["aten::silu_backward"], "swiglu_backward"),
    # Backward ops of forward families without a hand-written starter: init makes generated backward
    # tasks of them (the recorded forward chain, differentiated).
    **dict.fromkeys(["aten::native_group_norm_backward"], "group_norm_backward"),
    **dict.fromkeys(["aten::native_batch_norm_backward", "aten::cudnn_batch_norm_backward",
                     "aten::miopen_batch_norm_backward", "aten::batch_norm_backward"], "batch_norm_backward"),
    **dict.fromkeys(["aten::convolution_backward", "aten::cudnn_convolution_backward",
                     "aten::mkldnn_convolution_backward", "aten::_slow_conv2d_backward",
                     "aten::slow_conv3d_backward", "aten::convolution_backward_overrideable"], "conv_backward"),
    **dict.fromkeys(["aten::_flash_attention_backward", "aten::_efficient_attention_backward",
                     "aten::_scaled_dot_product_flash_attention_backward",
                     "aten::_scaled_dot_product_efficient_attention_backward",
                     "aten::_scaled_dot_product_cudnn_attention_backward",
                     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"], "attention_backward"),
}
# Metadata and allocation ops: no kernel on a GPU; on the CPU their self time is framework overhead.
OVERHEAD_ATEN = {
    "view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "t", "as_strided", "detach", "slice",
    "narrow", "split", "chunk", "empty", "empty_like", "empty_strided", "resize_", "arange", "squeeze",
    "unsqueeze", "permute", "select", "alias", "lift_fresh", "resolve_conj", "resolve_neg", "result_type",
    "slice_backward", "unbind", "split_with_sizes", "expand_as", "view_as", "flatten", "unflatten",
}
ELEMENTWISE_ATEN = {
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "exp", "log", "tanh", "tanh_", "sigmoid",
    "pow", "rsqrt", "sqrt", "erf", "where", "masked_fill", "masked_fill_", "relu", "relu_", "threshold_backward",
    "sigmoid_backward", "tanh_backward", "clamp", "abs", "sin", "cos", "reciprocal", "addcmul_", "addcdiv_",
    "lerp_", "ne", "eq", "lt", "gt", "le", "ge", "minimum", "maximum", "dropout", "native_dropout", "rsub",
    "triu", "tril", "_foreach_add_", "_foreach_mul_",
}

# Autograd node names (``autograd::engine::evaluate_function: XBackward0``) -> family.
BACKWARD_NODES = [
    (re.compile(r"^(Mm|Addmm|Bmm|Baddbmm|Mv|Addmv|Linear|Matmul)Backward"), "matmul"),
    (re.compile(r"ScaledDotProduct.*AttentionBackward|FlashAttentionBackward|EfficientAttentionBackward"),
     "attention_backward"),
    (re.compile(r"LayerNormBackward"), "layernorm_backward"),
    (re.compile(r"RmsNormBackward", re.I), "rmsnorm_backward"),
    (re.compile(r"^SoftmaxBackward"), "softmax_backward"),
    (re.compile(r"^(LogSoftmax|NllLoss|NllLoss2D|CrossEntropy)Backward"), "cross_entropy_backward"),
    (re.compile(r"^GeluBackward"), "gelu_backward"),
    (re.compile(r"^SiluBackward"), "swiglu_backward"),
    (re.compile(r"^EmbeddingBackward"), "embedding_backward"),
    (re.compile(r"GroupNormBackward"), "group_norm_backward"),
    (re.compile(r"BatchNorm.*Backward"), "batch_norm_backward"),
    (re.compile(r"^(Convolution|CudnnConvolution|MkldnnConvolution|SlowConv.*|ConvolutionBackwardOverrideable)Backward"),
     "conv_backward"),
]
# Forward families whose backward kernels count apart (``<family>_backward``) though no hand-written
# starter has them: generated backward tasks are made of their recorded forward chains.
GENERATED_BACKWARD = ("group_norm", "batch_norm", "conv", "attention_bidirectional")

# Kernel-name rules, first match wins. Names are matched case-insensitively.
KERNEL_RULES: list[tuple[re.Pattern, str]] = [(re.compile(p, re.I), f) for p, f in [
    (r"^memcpy|^memset|copy_kernel|catarraybatchedcopy|cat_batched|unrolled_elementwise_kernel.*copy", "copy"),
    (r"flash_bwd|fmha_cutlassb|fmha.*(bwd|backward)|attention_backward|sdpa.*bprop|bprop.*sdpa", "attention_backward"),
    (r"flash_fwd|flash::|pytorch_flash|fmha|sdpa|attention|_attn_fwd|mha_fwd", "attention"),
    (r"cross_entropy|nll_loss|log_softmax|logsoftmax", "cross_entropy"),
    (r"softmax", "softmax"),
    (r"fused_?add_?rms_?norm|add_rms_?norm", "add_rmsnorm"),
    (r"rms_?norm", "rmsnorm"),
    (r"layer_?norm|rowwisemoments|layernormforward|computefusedparams|gammabetabackward", "layernorm"),
    (r"rotary|_rope\b|^rope_", "rotary"),
    (r"swiglu|silu|act_and_mul", "swiglu"),
    (r"gelu", "gelu"),
    (r"fprop_implicit_gemm|dgrad|wgrad|conv2d|conv3d|convolution|implicit_convolve", "conv"),
    (r"^nvjet|xmma_gemm|xmma_.*gemm|gemm|gemv|cutlass|cublas|ampere_.*(s|h)\d+gemm|sm\d+_xmma|"
     r"\bdot_kernel|matmul|_mm_|splitkreduce|cudnn.*(conv|matmul)", "matmul"),
    (r"cudnn", OTHER),  # cuDNN kernels outside SDPA/conv: reported as such
    (r"embedding|indexselect|index_select|gatherkernel", "embedding"),
    (r"reduce_kernel|reduction|reduce_|triton_red_|triton_per_", "reduction"),
    (r"elementwise|triton_poi_|vectorized|unrolled", "elementwise"),
]]

# A label, or a starter's torch custom op (patch.as_custom_op: ``autokernel::<family>_<12 hex>``, its
# ``_saved`` and ``_bwd`` ops): in a traced graph the op is all a profile sees of the family, the
# module's own label being dropped with the graph's profiler ranges (run 26-27's ViT: layernorm "n/a")
_LABEL = re.compile(r"^autokernel::(?P<family>[a-z_0-9]+?)(?P<op>_[0-9a-f]{12}(_saved)?(?P<bwd>_bwd)?)?"
                    r"(\[(?P<dims>[^\]]*)\])?$")


def parse_label(name: str) -> tuple[str, dict] | None:
    """``autokernel::rotary[B=1,S=8,H=4,D=64]`` -> ("rotary", {"B": 1, ...}); a starter's custom op
    ``autokernel::layernorm_0123456789ab`` -> ("layernorm", {}), its backward op ("layernorm_backward", {});
    None if neither."""
    m = _LABEL.match(name)
    if not m:
        return None
    dims: dict = {}
    for part in filter(None, (m.group("dims") or "").split(",")):
        key, _, value = part.partition("=")
        dims[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return m.group("family") + ("_backward" if m.group("bwd") else ""), dims


def op_family(name: str) -> str | None:
    """Family of one op-level name (aten op or autograd node), or None when it says nothing."""
    if name in ATEN_FAMILY:
        return ATEN_FAMILY[name]
    if name.startswith("aten::") and name[6:] in ELEMENTWISE_ATEN:
        return "elementwise"
    if name.startswith("aten::") and name[6:] in OVERHEAD_ATEN:
        return "overhead"
    node = name.split(": ", 1)[1] if name.startswith("autograd::engine::evaluate_function: ") else None
    if node:
        for pattern, family in BACKWARD_NODES:
            if pattern.search(node):
                return family
    return None


def kernel_family(kernel: str) -> str:
    """Family from the kernel name alone."""
    for pattern, family in KERNEL_RULES:
        if pattern.search(kernel):
            return family
    return OTHER


def is_backward(ancestors: list[str]) -> bool:
    return any(a.startswith("autograd::engine::evaluate_function") or a.endswith("_backward")
               or "Backward" in a for a in ancestors)


def classify(kernel: str, ancestors: list[str] = (), causal: bool | None = None) -> str:
    """Family of a kernel. ``ancestors``: the names of the ops above it, outermost first."""
    return classify_detail(kernel, ancestors, causal)[0]


def classify_detail(kernel: str, ancestors: list[str] = (), causal: bool | None = None,
                    named: dict[str, str] | None = None) -> tuple[str, int | None]:
    """(family, index in ``ancestors`` of the op that decided it, or None when the kernel name did).
    ``named``: {kernel name: family} for kernels known by name, below a label but above everything else."""
    ancestors = list(ancestors)
    family, anchor = None, None
    for i, name in enumerate(ancestors):  # labels are the most specific evidence: the innermost one wins
        parsed = parse_label(name)
        if parsed:
            family, anchor = parsed[0], i
    if family is None and named and kernel in named:
        # verify's generated kernels (Triton launched inside a label that the profiler of torch 2.11 on
        # the H200 did not tie them to: run 11's conv kernels counted as other families)
        family = named[kernel]
    if family is None:
        # The outermost specific op wins; a generic one (copy, elementwise...) only if nothing better.
        generic = None
        for i, name in enumerate(ancestors):
            f = op_family(name)
            if f is None:
                continue
            if f in GENERIC:
                generic = generic or (f, i)
                continue
            family, anchor = f, i
            break
        if family is None:
            # A specific kernel name (e.g. an inductor softmax) beats a generic op around it.
            by_name = kernel_family(kernel)
            if by_name in GENERIC and generic:
                family, anchor = generic
            else:
                family = by_name
    if family == "attention":
        family = "flash_attention" if causal in (True, None) else "attention_bidirectional"
    if is_backward(ancestors) and family in STARTER_FAMILIES + GENERATED_BACKWARD:
        family = f"{family}_backward"
    if family == "attention_backward":
        family = "flash_attention_backward" if causal in (True, None) else "attention_bidirectional_backward"
    return family, anchor


def starter_task(family: str) -> str | None:
    """The starter task that implements this family, if there is one: a forward family's own, and
    for ``<family>_backward`` the ``<task>_bwd`` backward task beside it."""
    if family in STARTER_FAMILIES:
        return family
    forward = family.removesuffix("_backward")
    if forward != family and forward in STARTER_FAMILIES and forward != "matmul":
        return f"{forward}_bwd"
    return None
