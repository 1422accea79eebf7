"""Matrix multiply C = A @ B (+ bias) in Triton: the one file an agent edits.

One program per BLOCK_M x BLOCK_N tile of C, tiles visited in groups of GROUP_M
rows of tiles so that neighbouring programs share A and B tiles in L2. fp32
accumulation; fp32 inputs use full-precision ("ieee") dots, never TF32, to
honour torch's allow_tf32=False default. 16-bit and fp32 inputs have separate
tile knobs because fp32 tiles take twice the shared memory.

USE_TMA = 1 switches 16-bit inputs to a persistent variant (one program per SM
walking the tiles, operands loaded through TMA tensor descriptors, Hopper and
newer). TMA needs 16-byte-aligned rows: an operand without them (odd K or N,
e.g. GPT-2's 50257-wide LM head) is first copied into a padded buffer, and an
unaligned C is written with masked pointer stores. B may also come as a
transposed [N, K] matrix (nn.Linear's weight.t(), the layout a model calls it
with): its descriptor then walks the weight's rows and each tile is transposed
in shared memory, with no copy. Other column-strided operands take the pointer
kernel. A bias (nn.Linear's, one value per column of C) is added in the
epilogue to the fp32 sums, as cuBLAS's addmm does, and a GELU that follows the
Linear is applied there too: no second pass over C for either.

16-bit shapes whose big tiles would leave the last wave of SMs poorly filled
take the SMALL_* config (smaller tiles; the persistent loop flattened so the
next tile's loads overlap this tile's epilogue); the rest keep the big tiles,
short K loops included (H200 sweep, 2026-12-02: 128x256 tiles beat 128x128 at
8192x2304x768 and 3000x5000x1000, 128x128 wins at 8192x768x3072, 1.45 waves).
"""

import collections

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

# Tunable knobs (16-bit inputs): module-level constants the offline tuner rewrites.
BLOCK_M = 128
BLOCK_N = 256
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
USE_TMA = 1  # persistent TMA-descriptor kernel for 16-bit inputs (0: pointer kernel only)
TMA_FLATTEN = 1  # 1: flatten the tile and K loops into one pipelined loop (the tuner's confirmed keep, H200 run 5)
PROGRAMS_PER_SM = 1  # persistent programs per SM (2: a second program's loads overlap one's epilogue); 0 = one per tile
# Warp specialization (Triton's automatic pass, Hopper and newer): a producer warp group issues the TMA
# loads while the consumer groups (NUM_WARPS each: 4 gives two consumers of 64 rows at BLOCK_M = 128)
# run the tensor-core MMAs and the epilogue. With it on, the kernel makes its TMA descriptors itself from
# pointers (the pass must split their blocks between consumers; a host-made descriptor's block is fixed:
# Triton 3.7's sm_90 compile refuses 128-row tiles with 4 warps that way), and the tile loop is not
# flattened (Hopper's pass takes it unflattened).
WARP_SPECIALIZE = 0
# Small problems take their own 16-bit tile config: a short K loop leaves each tile's
# prologue and epilogue exposed, and few big tiles leave the last wave of SMs half idle.
SMALL_BLOCK_M = 128
SMALL_BLOCK_N = 128
SMALL_BLOCK_K = 64
SMALL_NUM_WARPS = 8
SMALL_NUM_STAGES = 4
SMALL_FLATTEN = 1  # pipeline the next tile's loads under this tile's epilogue
SMALL_PROGRAMS_PER_SM = 1
SMALL_WARP_SPECIALIZE = 0
SMALL_MAX_K = 0  # K below this takes the small config (0: only the wave fill decides)
MIN_WAVE_FILL_PCT = 85  # ...and so do shapes whose big tiles fill the SM waves less than this
# Tiny problems (GPT-2's 1024 x 768 x 768: 48 small tiles on 132 SMs) take smaller tiles still, when the
# small config's tiles would busy fewer than TINY_MAX_FILL_PCT % of the SMs (0: never). Run 27 (H100,
# knob_sweep at gpt2-proj-b1, bf16): 64 x 128 tiles, 4 warps, 10.4 -> 8.8 us (0.76x -> 0.90x cuBLAS);
# 64 x 64 were slower (11.0-12.2 us). Run 28 (H100, 64 combinations): K steps of 128 and one program per
# tile, 1.070x those (0.89x -> 0.95x cuBLAS by the harness timer; in a CUDA graph 5.1 us against 4.7).
TINY_BLOCK_M = 64
TINY_BLOCK_N = 128
TINY_BLOCK_K = 128
TINY_NUM_WARPS = 4
TINY_NUM_STAGES = 4
TINY_MAX_FILL_PCT = 100
TINY_PROGRAMS_PER_SM = 0  # 0: one program per tile (tiles past one per SM share SMs instead of queueing)
TINY_WARP_SPECIALIZE = 0
# Tunable knobs (fp32 inputs).
FP32_BLOCK_M = 128
FP32_BLOCK_N = 64
FP32_BLOCK_K = 32
FP32_NUM_WARPS = 8
FP32_NUM_STAGES = 3


# The epilogue's activation (ACT): a Linear followed by a GELU computes it on the tile in registers,
# where eager, cuBLAS and Inductor (whose mm is a library call) spend a pass over C on it.
ACTIVATIONS = {"none": 0, "gelu": 1, "gelu_tanh": 2}


@triton.jit
def _epilogue(acc, Bias, cn, N, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """The fp32 tile before its one rounding: + a Linear's bias (one value per column, as cuBLAS's addmm
    adds it), then the activation."""
    if HAS_BIAS:
        acc += tl.load(Bias + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = acc * _normal_cdf(acc)
    if ACT == 2:  # x/2 (1 + tanh(z)) == x / (1 + exp(-2z)): no cancellation near tanh = -1
        z = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp2(z * -2.8853900817779268))  # -2 * log2(e)
    return acc


@triton.jit
def _normal_cdf(x):
    # Phi(x) from erfc's Chebyshev fit (Numerical Recipes erfcc, relative error < 1.2e-7), as the gelu
    # starter computes it: one rcp, ten FMAs and one ex2, cheaper than libdevice's erf; the x < 0 side
    # never forms 1 + erf, so the tail keeps its digits.
    t = 1.0 / (1.0 + tl.abs(x) * 0.35355339059327373)
    p = 0.24651729790196045 * t - 1.1861149450768025
    p = p * t + 2.147474463933521
    p = p * t - 1.637753152343414
    p = p * t + 0.40232158165127635
    p = p * t - 0.2687568603388257
    p = p * t + 0.1396300565225048
    p = p * t + 0.5397006155284324
    p = p * t + 1.4427292039075317
    p = p * t - 2.825748218405333
    half_erfc = t * tl.exp2(p - x * x * 0.7213475204444817)  # = erfc(|x| / sqrt(2)) / 2
    return tl.where(x >= 0, 1.0 - half_erfc, half_erfc)


@triton.jit
def _matmul(A, B, C, Bias, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
            IEEE: tl.constexpr, WIDEN: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    # Grouped order: GM rows of tiles are swept column by column, for L2 reuse.
    per_group = GM * tiles_n
    group = pid // per_group
    first_m = group * GM
    group_m = min(tiles_m - first_m, GM)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    # Rows/columns past the edge wrap around (their results are never stored),
    # so only the K tail needs a load mask.
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rm = tl.max_contiguous(tl.multiple_of(rm, BM), BM)
    rn = tl.max_contiguous(tl.multiple_of(rn, BN), BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = B + rk[:, None] * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        k_left = K - k * BK
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE or WIDEN:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk

    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    acc = _epilogue(acc, Bias, cn, N, HAS_BIAS, ACT)
    c_ptrs = C + cm[:, None].to(tl.int64) * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(cm < M)[:, None] & (cn < N)[None, :])


@triton.jit
def _matmul_tma(a_desc, b_desc, c_desc, Bias, M, N, K, stride_cm, stride_a, stride_b,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
                NUM_PROGRAMS: tl.constexpr, WIDEN: tl.constexpr, FLATTEN: tl.constexpr, C_PTR: tl.constexpr,
                B_T: tl.constexpr, WS: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    if WS:  # pointers in: descriptors made here, so the warp-specialization pass can split their blocks
        a_desc = tl.make_tensor_descriptor(a_desc, shape=[M, K], strides=[stride_a, 1], block_shape=[BM, BK])
        if B_T:
            b_desc = tl.make_tensor_descriptor(b_desc, shape=[N, K], strides=[stride_b, 1], block_shape=[BN, BK])
        else:
            b_desc = tl.make_tensor_descriptor(b_desc, shape=[K, N], strides=[stride_b, 1], block_shape=[BK, BN])
        if not C_PTR:
            c_desc = tl.make_tensor_descriptor(c_desc, shape=[M, N], strides=[stride_cm, 1], block_shape=[BM, BN])
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GM * tiles_n
    # Persistent: each program walks tiles pid, pid + NUM_PROGRAMS, ... in grouped order.
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WS):
        group = tile // per_group
        first_m = group * GM
        group_m = min(tiles_m - first_m, GM)
        pid_m = first_m + (tile % per_group) % group_m
        pid_n = (tile % per_group) // group_m
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            # TMA zero-fills out-of-bounds rows and columns: no masks needed.
            a = a_desc.load([pid_m * BM, k * BK])
            if B_T:  # b_desc walks B^T[N, K] (a Linear's weight): load [BN, BK], use its transpose
                b = b_desc.load([pid_n * BN, k * BK]).T
            else:
                b = b_desc.load([k * BK, pid_n * BN])
            if WIDEN:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        cn = pid_n * BN + tl.arange(0, BN)
        acc = _epilogue(acc, Bias, cn, N, HAS_BIAS, ACT)
        if C_PTR:  # C's rows are not 16-byte aligned (odd N): masked pointer stores
            cm = pid_m * BM + tl.arange(0, BM)
            c_ptrs = c_desc + cm[:, None].to(tl.int64) * stride_cm + cn[None, :]
            tl.store(c_ptrs, acc.to(c_desc.dtype.element_ty), mask=(cm < M)[:, None] & (cn < N)[None, :])
        else:
            c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))  # TMA clips the edges


# Triton 3.7's CPU interpreter multiplies bf16 tiles as their raw uint16 bits;
# under it, tiles are widened to fp32 first (exact: same products, same sums).
# triton.jit returns a compiled JITFunction, or a stand-in when interpreting.
_INTERPRETED = not isinstance(_matmul, triton.JITFunction)


@triton.jit
def _copy_rows(Src, Dst, R, C, stride_s, stride_d, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    v = tl.load(Src + rows[:, None].to(tl.int64) * stride_s + cols[None, :], mask=mask)
    tl.store(Dst + rows[:, None].to(tl.int64) * stride_d + cols[None, :], v, mask=mask)


def _tma_ok(*tensors) -> bool:
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 and t.stride(1) == 1
               for t in tensors)


_SMS: dict = {}  # device -> SM count, asked once per device


def _num_sms(device) -> int:
    sms = _SMS.get(device)
    if sms is None:
        if device.type == "cuda":
            sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            sms = 2  # interpreted: small, so the test shapes reach both tile configs
        _SMS[device] = sms
    return sms


def _wave_fill(m: int, n: int, bm: int, bn: int, sms: int) -> float:
    """Fraction of SM slots busy over the waves the tiles need (1.0: no idle SMs in the last wave)."""
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    return tiles / (triton.cdiv(tiles, sms) * sms)


def config_16bit(m: int, n: int, k: int, sms: int) -> tuple:
    """(BM, BN, BK, warps, stages, flatten, programs per SM, warp specialization) for 16-bit inputs of this shape.

    C rows that are not 16-byte aligned (n % 8) are stored through masked pointers, whose
    epilogue spills registers with the big tiles (sm_90 compile: 255 regs, 179 STL): small tiles.
    """
    if k < SMALL_MAX_K or n % 8 or 100 * _wave_fill(m, n, BLOCK_M, BLOCK_N, sms) < MIN_WAVE_FILL_PCT:
        if 100 * triton.cdiv(m, SMALL_BLOCK_M) * triton.cdiv(n, SMALL_BLOCK_N) < TINY_MAX_FILL_PCT * sms:
            return (TINY_BLOCK_M, TINY_BLOCK_N, TINY_BLOCK_K, TINY_NUM_WARPS, TINY_NUM_STAGES, SMALL_FLATTEN,
                    TINY_PROGRAMS_PER_SM, TINY_WARP_SPECIALIZE)
        return (SMALL_BLOCK_M, SMALL_BLOCK_N, SMALL_BLOCK_K, SMALL_NUM_WARPS, SMALL_NUM_STAGES, SMALL_FLATTEN,
                SMALL_PROGRAMS_PER_SM, SMALL_WARP_SPECIALIZE)
    return BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES, TMA_FLATTEN, PROGRAMS_PER_SM, WARP_SPECIALIZE


# Launch plans, decided once per input signature: (shapes, strides, dtype, device, 16-byte alignment
# of a and b) -> _Plan. A call is a key, one dict lookup, the allocation(s) and the launch; the plan
# is computed from the knobs above.
_PLANS: dict = {}
# tma: the descriptor kernel; pad_a/pad_b: None or (padded columns, bound _copy_rows, its int args);
# desc_a/desc_b/desc_c: [shape, strides, block] of each descriptor (desc_c None: C through pointers)
# made_under: the _knobs() it was computed under (see _knobs)
# b_t: B is read through its transpose (B^T[N, K] row-major, as nn.Linear stores its weight)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta tma b_t pad_a pad_b desc_a desc_b desc_c")


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_WARPS, NUM_STAGES, USE_TMA, TMA_FLATTEN, PROGRAMS_PER_SM,
        WARP_SPECIALIZE, SMALL_BLOCK_M, SMALL_BLOCK_N, SMALL_BLOCK_K, SMALL_NUM_WARPS, SMALL_NUM_STAGES,
        SMALL_FLATTEN, SMALL_PROGRAMS_PER_SM, SMALL_WARP_SPECIALIZE, SMALL_MAX_K, MIN_WAVE_FILL_PCT,
        TINY_BLOCK_M, TINY_BLOCK_N, TINY_BLOCK_K, TINY_NUM_WARPS, TINY_NUM_STAGES, TINY_MAX_FILL_PCT,
        TINY_PROGRAMS_PER_SM, TINY_WARP_SPECIALIZE, FP32_BLOCK_M, FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS,
        FP32_NUM_STAGES, _INTERPRETED, _matmul, _matmul_tma, _copy_rows,
    )


def _pad_plan(t: torch.Tensor):
    """None when TMA can read t in place, else how to copy it to rows that start 16-byte aligned."""
    if _tma_ok(t):
        return None
    r, c = t.shape
    per16 = 16 // t.element_size()
    cols = triton.cdiv(c, per16) * per16
    return cols, _copy_rows[(triton.cdiv(r, 32), triton.cdiv(c, 128))], (r, c, t.stride(0), cols)


def _padded(t: torch.Tensor, pad) -> torch.Tensor:
    """A copy of t whose rows start 16-byte aligned, as _pad_plan planned it.

    The copy is a [R, C] view of an [R, C rounded up to 16 bytes] buffer: TMA
    zero-fills past C, so the padding is never read. One extra pass over an
    operand costs a few percent of a GEMM; the pointer kernel on 2-byte-aligned
    rows (no vector loads, no async copies) costs far more.
    """
    cols, launch, args = pad
    buf = torch.empty((t.shape[0], cols), dtype=t.dtype, device=t.device)
    launch(t, buf, *args, BR=32, BC=128, num_warps=8)  # 4 warps spill (sm_90 compile)
    return buf[:, :t.shape[1]]


def _plan(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str, made_under: tuple):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs a[M,K] @ b[K,N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    if bias is not None and (bias.shape != (n,) or bias.stride(0) != 1):
        raise ValueError(f"matmul's bias must be one packed value per column ({n}), got {tuple(bias.shape)} "
                         f"with strides {bias.stride()}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"matmul's activation is one of {', '.join(ACTIVATIONS)}, not {activation!r}")
    act = ACTIVATIONS[activation]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)  # like every call's output: fresh, packed, aligned
    if a.dtype == torch.float32:
        bm, bn, bk, warps, stages = FP32_BLOCK_M, FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES
        flatten, per_sm, ws = TMA_FLATTEN, PROGRAMS_PER_SM, 0
    else:
        bm, bn, bk, warps, stages, flatten, per_sm, ws = config_16bit(m, n, k, _num_sms(a.device))
    flatten = flatten and not ws  # Hopper's warp specialization takes an unflattened loop
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    widen = _INTERPRETED and a.dtype == torch.bfloat16
    b_t = b.stride(1) != 1 and b.stride(0) == 1  # B^T is row-major: a Linear's weight, transposed
    if USE_TMA and a.dtype != torch.float32 and a.stride(1) == 1 and (b.stride(1) == 1 or b_t):
        pad_a, pad_b = _pad_plan(a), _pad_plan(b.t() if b_t else b)
        c_ptr = not _tma_ok(c)
        programs = min(tiles, _num_sms(a.device) * per_sm) if per_sm > 0 else tiles
        grid = (programs,)
        stride_a = [pad_a[0] if pad_a else a.stride(0), 1]
        if b_t:
            desc_b = ([n, k], [pad_b[0] if pad_b else b.stride(1), 1], [bn, bk])
        else:
            desc_b = ([k, n], [pad_b[0] if pad_b else b.stride(0), 1], [bk, bn])
        stride_b = desc_b[1][0]
        return _Plan(made_under, _matmul_tma[grid], grid, (m, n, k, c.stride(0), stride_a[0], stride_b),
                     dict(BM=bm, BN=bn, BK=bk, GM=GROUP_M, NUM_PROGRAMS=programs, FLATTEN=bool(flatten),
                          WIDEN=widen, C_PTR=c_ptr, B_T=b_t, WS=bool(ws), HAS_BIAS=bias is not None, ACT=act,
                          num_warps=warps, num_stages=stages),
                     True, b_t, pad_a, pad_b, ([m, k], stride_a, [bm, bk]), desc_b,
                     None if c_ptr else ([m, n], [c.stride(0), 1], [bm, bn]))
    grid = (tiles,)
    return _Plan(made_under, _matmul[grid], grid, (m, n, k, *a.stride(), *b.stride(), *c.stride()),
                 dict(BM=bm, BN=bn, BK=bk, GM=GROUP_M, IEEE=a.dtype == torch.float32, WIDEN=widen,
                      HAS_BIAS=bias is not None, ACT=act, num_warps=warps, num_stages=stages),
                 False, False, None, None, None, None, None)


def kernel_fn(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
              activation: str = "none") -> torch.Tensor:
    """a @ b, plus ``bias`` (one value per column, a Linear's) when given, then ``activation`` ("none",
    "gelu", "gelu_tanh": a Linear followed by a GELU), all in the epilogue."""
    key = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device,
           a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0,
           None if bias is None else (bias.shape, bias.stride()), activation)
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(a, b, bias, activation, knobs)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    bias = c if bias is None else bias  # without a bias, any pointer: HAS_BIAS is off and it is never read
    if not p.tma:
        p.launch(a, b, c, bias, *p.args, **p.meta)
        return c
    a_t = a if p.pad_a is None else _padded(a, p.pad_a)
    b_rows = b.t() if p.b_t else b
    b_t = b_rows if p.pad_b is None else _padded(b_rows, p.pad_b)
    if p.meta["WS"]:  # descriptors made on the device: Triton asks for their scratch at launch
        triton.set_allocator(_descriptor_scratch)
        p.launch(a_t, b_t, c, bias, *p.args, **p.meta)
        return c
    p.launch(TensorDescriptor(a_t, *p.desc_a), TensorDescriptor(b_t, *p.desc_b),
             c if p.desc_c is None else TensorDescriptor(c, *p.desc_c), bias, *p.args, **p.meta)
    return c


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory for descriptors a kernel makes on the device (128 bytes each per program), from
    torch's caching allocator on the current device: inside a CUDA graph, from the graph's own pool."""
    return torch.empty(size, dtype=torch.int8, device="cuda")
