"""Kernel names as Hopper/Blackwell traces print them -> op family (and the ops above them)."""

import pytest

from autokernel_tui.profiling.classify import classify, classify_detail, parse_label, starter_task

# (kernel name, ancestors outermost first, expected family). Names are from real traces.
REAL_KERNELS = [
    # cuBLAS on Hopper (nvjet) and its older xmma/cutlass/ampere kernels
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", [], "matmul"),
    ("nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT", [], "matmul"),
    ("nvjet_tst_256x96_64x5_2x1_2cta_v_badd_NNT", ["aten::baddbmm"], "matmul"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", ["aten::linear", "aten::addmm"], "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     [], "matmul"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     ["aten::mm"], "matmul"),
    ("sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cgasize2x1x1_execute_segment_k_off_kernel__5x_cublas",
     [], "matmul"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)", [], "matmul"),
    ("cutlass3x_sm100_tensorop_gemm_bf16_bf16_f32_bf16_bf16_256x128x64_2x1x1_0_tnn_align8_2sm", [], "matmul"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", [], "matmul"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>"
     "(cublasSplitKParams<float>, __nv_bfloat16 const*, float const*, __nv_bfloat16*, float const*, float const*)",
     [], "matmul"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", [], "matmul"),
    # attention: flash, memory-efficient (cutlass fmha), cuDNN SDPA; forward and backward
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
     "(pytorch_flash::Flash_fwd_params)", [], "flash_attention"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4>>", [], "flash_attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8>>", [],
     "flash_attention_backward"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", [], "flash_attention"),
    ("fmha_cutlassB_bf16_aligned_128x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<...>::Params)", [],
     "flash_attention_backward"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", [],
     "flash_attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_5_64x128x128_4x2x1_kernel0_0", [],
     "flash_attention_backward"),
    ("void pytorch_flash::flash_fwd_kernel<...>", ["aten::scaled_dot_product_attention"], "flash_attention"),
    # norms, softmax, activations, loss
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
     "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     [], "layernorm"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*, "
     "float*, float*)", [], "layernorm"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>",
     ["autograd::engine::evaluate_function: NativeLayerNormBackward0", "NativeLayerNormBackward0",
      "aten::native_layer_norm_backward"], "layernorm_backward"),
    ("FusedAddRMSNormKernel", [], "add_rmsnorm"),
    ("rms_norm_batched_offset", [], "rmsnorm"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
     [], "softmax"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
     "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)", ["aten::_softmax"], "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", [], "cross_entropy"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     ["aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax"], "cross_entropy"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>"
     "(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)", [], "cross_entropy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
     "{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, ...)", [], "gelu"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
     ["aten::gelu"], "gelu"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::"
     "{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}>", [], "swiglu"),
    ("act_and_mul_kernel", [], "swiglu"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl<...>>",
     ["autograd::engine::evaluate_function: GeluBackward0", "GeluBackward0", "aten::gelu_backward"], "gelu_backward"),
    # generic: elementwise, reductions, copies, embedding, Triton
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
     ["aten::add"], "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, "
     "float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, ...)>(int, ...)",
     [], "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4> >(at::native::ReduceOp<...>)", [], "reduction"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
     "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, ...)>(int, ...)", [], "copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 4, 64, 64>(...)", [], "copy"),
    ("Memcpy HtoD (Pageable -> Device)", [], "copy"),
    ("Memset (Device)", [], "copy"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"
     "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, ...)", ["aten::embedding"], "embedding"),
    ("triton_per_fused__softmax_0", [], "softmax"),
    ("triton_red_fused__log_softmax_nll_loss_forward_1", [], "cross_entropy"),
    ("triton_poi_fused_gelu_2", [], "gelu"),
    ("triton_poi_fused_mul_silu_3", [], "swiglu"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", [], "reduction"),
    ("triton_poi_fused_arange_ge_index_put_lift_fresh_0", [], "elementwise"),
    ("triton_tem_fused_mm_0", ["aten::mm"], "matmul"),
    # our own Triton kernels: the patch label (or the aten op that launched them) decides
    ("_rmsnorm_rows", ["autokernel::rmsnorm"], "rmsnorm"),
    ("_kernel", ["autokernel::flash_attention"], "flash_attention"),
    ("_fwd_kernel", ["autokernel::swiglu[M=4096,N=11008]"], "swiglu"),
    # what nothing recognises is reported as other
    ("void some_vendor::mystery_kernel<int>(int)", [], "other"),
    ("cudnn::detail::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>", [], "other"),
    # backward matmuls are matmul_backward: generated backward tasks of the forward's chains
    ("nvjet_tst_128x128_64x4_1x2_h_bz_coopA_NTN",
     ["autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"], "matmul_backward"),
]


@pytest.mark.parametrize("kernel,ancestors,family", REAL_KERNELS, ids=[k[0][:40] for k in REAL_KERNELS])
def test_real_kernel_names(kernel, ancestors, family):
    assert classify(kernel, ancestors) == family


def test_outermost_specific_op_decides_and_is_the_anchor():
    # cross_entropy_loss -> log_softmax -> _log_softmax: one family, anchored at the outermost op.
    family, anchor = classify_detail("cunn_SoftMaxForward", ["aten::cross_entropy_loss", "aten::log_softmax",
                                                             "aten::_log_softmax"])
    assert (family, anchor) == ("cross_entropy", 0)
    # A copy inside layer_norm belongs to layer_norm, not to "copy".
    assert classify("direct_copy_kernel_cuda", ["aten::layer_norm", "aten::contiguous", "aten::copy_"]) == "layernorm"


def test_bidirectional_attention_has_no_causal_starter():
    assert classify("flash_fwd_kernel", ["aten::scaled_dot_product_attention"], causal=False) == "attention_bidirectional"
    assert starter_task("attention_bidirectional") is None
    assert starter_task("flash_attention") == "flash_attention"
    assert starter_task("layernorm_backward") == "layernorm_bwd"  # the backward task beside the starter
    assert starter_task("matmul_backward") is None


def test_labels_carry_their_dims():
    assert parse_label("autokernel::gelu[M=8,N=3072,approximate=tanh]") == ("gelu", {"M": 8, "N": 3072,
                                                                                    "approximate": "tanh"})
    assert parse_label("autokernel::matmul") == ("matmul", {})
    assert parse_label("aten::mm") is None


def test_a_starters_custom_op_is_its_familys_label():
    """In a traced graph a starter runs as a torch custom op (patch.as_custom_op) and the module's own
    label is dropped with the graph's profiler ranges: the op's name must say the family, or a profile of
    the patched model charges its kernels to "layernorm_<hash>" (run 26-27's ViT: layernorm "n/a")."""
    import torch

    from autokernel_tui.profiling import patch

    def fn(x, weight, bias, eps):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)

    before = set(patch._OPS)
    patch.as_custom_op("layernorm", fn)
    (name,) = set(patch._OPS) - before
    assert parse_label(name) == ("layernorm", {})
    assert classify_detail("_layernorm_rows", ["aten::view", name])[0] == "layernorm"
    assert parse_label(f"{name}_saved") == ("layernorm", {})
    assert parse_label(f"{name}_bwd") == ("layernorm_backward", {})
    assert parse_label("autokernel::add_rmsnorm") == ("add_rmsnorm", {})  # a family with "_" stays whole
