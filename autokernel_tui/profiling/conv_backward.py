"""A convolution's backward as forward convolutions, for generated backward tasks (issue 20).

Inductor leaves ``aten.convolution_backward`` to cuDNN (a fallback it writes no Triton for), so a
conv net's backward task had no starter. Traced with this decomposition (``make_fx``'s
``decomposition_table``), each gradient is a convolution, which Inductor hands to the library and
``inductor_starter`` turns into the GEMM template's implicit GEMM:

* the input's gradient: the transposed convolution of ``grad_out`` with the same weight (for a
  transposed convolution, the plain one), its output padding what the forward's rounding lost;
* the weight's gradient: a convolution whose batch is the input channels of a group and whose
  channels are the batch: ``x`` as (C/g, g*N, *S) convolved with ``grad_out`` as (g*OC/g, N, *O),
  ``groups = g``, stride and dilation swapped; (a transposed convolution: the roles of ``x`` and
  ``grad_out`` swapped), cut to the kernel's size;
* the bias's gradient: ``grad_out`` summed over all but its channels.
"""

from __future__ import annotations

from typing import Any


def _as_batch_of_channels(t: Any, groups: int) -> Any:
    """(N, g*Cg, *S) -> (Cg, g*N, *S): each group's channels as the batch, the batch as channels."""
    import torch

    n, c, rest = t.shape[0], t.shape[1], list(t.shape[2:])
    v = t.reshape(n, groups, c // groups, *rest).permute(2, 1, 0, *range(3, 3 + len(rest)))
    return v.contiguous(memory_format=torch.contiguous_format).reshape(c // groups, groups * n, *rest)


def _as_filters(t: Any) -> Any:
    """(N, g*Cg, *S) -> (g*Cg, N, *S): a filter per channel over the batch (grouped as the channels are)."""
    return t.transpose(0, 1).contiguous()


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    """``aten.convolution_backward`` (1- to 3-D, grouped, transposed or not) with convolutions only."""
    import torch

    aten = torch.ops.aten
    spatial = x.dim() - 2
    each = lambda v: list(v) * spatial if len(list(v)) == 1 else list(v)  # noqa: E731
    stride, padding, dilation = each(stride), each(padding), each(dilation)
    ksize = list(weight.shape[2:])
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if transposed:  # the input's gradient of a transposed convolution is the plain one
            grad_input = aten.convolution.default(grad_out, weight, None, stride, padding, dilation, False,
                                                  [0] * spatial, groups)
        else:  # the transposed convolution, with the rows the forward's rounding dropped put back
            extra = [s_in - ((o - 1) * s - 2 * p + d * (k - 1) + 1)
                     for s_in, o, s, p, d, k in zip(x.shape[2:], grad_out.shape[2:], stride, padding, dilation, ksize)]
            grad_input = aten.convolution.default(grad_out, weight, None, stride, padding, dilation, True, extra,
                                                  groups)
    if output_mask[1]:
        # plain: dW[oc, c, k] = sum over n, o of dY[n, oc, o] x[n, c, o*s + k*d - p]
        # transposed: dW[c, oc, k] = sum over n, i of x[n, c, i] dY[n, oc, i*s + k*d - p]
        source, filters = (grad_out, x) if transposed else (x, grad_out)
        r = aten.convolution.default(_as_batch_of_channels(source, groups), _as_filters(filters),
                                     None, dilation, padding, stride, False, [0] * spatial, groups)
        r = r[(slice(None), slice(None), *(slice(0, k) for k in ksize))]
        grad_weight = r.transpose(0, 1).contiguous()
    if output_mask[2]:
        grad_bias = grad_out.sum([0, *range(2, grad_out.dim())])
    return grad_input, grad_weight, grad_bias


def decompositions() -> dict:
    """``make_fx``'s decomposition table: the convolution's backward as convolutions."""
    import torch

    return {torch.ops.aten.convolution_backward.default: convolution_backward}
