#!/usr/bin/env bash
# One device session on the H200, in two warm calls (each under the tool's
# 10-minute limit). Everything lands in /tmp/res/<part>/ and comes back as one
# tarball per part under $OUT (the tool returns at most 8 files).
#
#   part1: correctness of every starter at full shapes, harness speed/A-A/3%,
#          model profiles + verify + export, offline tuner budget (tuned kernels saved)
#   part2: kernel quality side by side (starter, tuned, eager, torch.compile), GPU-marked tests
#   harness: harness speed/A-A/detection, GPU-marked tests, L2 flush by write vs by read
#   sweeps: knob sweeps of the starters at the shapes where they miss their targets
#   run3a: starters at full shapes, harness speed/A-A/detection, offline tuner (tuned kernels kept)
#   run3b (same warm machine, after run3a): kernel quality with the tuned kernels, Nsight Compute probes
#   run3c: wide-row sweeps (best combination written into kernel.py), then those starters' correctness
#          and quality, harness speed/A-A/detection, GPU tests, a matmul sweep at the odd shapes
#   run4a: sweeps of the register-resident row path and the rows path (norms, softmax) and of
#          cross-entropy's chunking, winners written into kernel.py (copies kept in applied/); those
#          starters' correctness at full shapes and quality (no compile); GPU tests; Nsight probes
#   run4b: the looped/online row kernels and cross-entropy with software-pipelined chunks (cp.async
#          prefetch, *NUM_STAGES knobs) against the resident path, winners applied; then as run4a
#   run4c: bounded grids for the looped/online kernels (*PROGRAMS_PER_SM: fewer rows in flight, so
#          their second read hits L2) crossed with pipelining depth; cross-entropy rows split into
#          segments; winners applied; correctness; the offline tuner. (Both ideas measured no better
#          and were reverted: tree 7091059, results in h200-run4/run4c.)
#   run5a: correctness of the retuned starters, then the offline tuner on all ten (keeps confirmed by a
#          second, role-swapped comparison); run5b (warm, after run5a): kernel quality with those tuned
#          kernels, GPU-marked tests
#   run5c: layernorm's starter after the warps rule that run5b's numbers called for, side by side
#   run5d: harness A/A and detection rates with confirmed keeps (rmsnorm, softmax)
#   run6a: sweeps of the looped/online row kernels' second pass walked backwards (LOOP_PASS2_REVERSED)
#          against forwards, of per-lane running maxima (LANE_MAX: softmax, cross-entropy) against a row
#          max per chunk, and of warps per row; winners written into kernel.py (copies in applied/, to
#          commit before run6b); those five starters' correctness at full shapes
#   run6b: cross-entropy's fused mean swept (FUSED_MEAN), then those five starters side by side (eager,
#          torch.compile); Nsight Compute of both settings of each new knob
#   run6c: cross-entropy's lane width swept (winner applied), Nsight Compute of softmax where it misses and of
#          fp32 cross-entropy lanes, then kernel quality of all ten starters, each shape beside a copy of
#          the same bytes (its ceiling at that size)
#   run6d: cross-entropy and matmul starters after run6c, softmax resident-path warps swept (applied);
#          correctness at full shapes, side by side, GPU-marked tests
#   run6e: Nsight Compute of the misses without a profile (rmsnorm/layernorm under compile, matmul odd,
#          cross-entropy 4096x32000, softmax odd with pipe utilisation) and of Inductor's and cuBLAS's
#          kernels at those shapes; big-tile matmul sweep at odd
#   run6f: rmsnorm's and layernorm's rows path swept over warps and row block (their misses under compile)
#   run6g: Inductor's rmsnorm/layernorm kernels profiled in the mode measured, and their source; rmsnorm 8192-wide
#          rows looped (odd+large, then large alone with both pass-2 directions)
#   run6h: rmsnorm's rows path in chunks (as Inductor's kernel) and its warps, layernorm's rows path down to one
#          warp per row (as Inductor's); winners applied; correctness, Nsight, side by side, GPU tests
#   run6i: the rows paths of rmsnorm/layernorm with 32-bit offsets and x evict-first (as Inductor's kernels)
#   run6j: run6i's winners; rmsnorm's chunked rows where chunks tile the row, swept; side by side of both norms
#   run6k: the final tree: correctness of the norms, the side by side of all ten starters in one run
#   run6l: the norms again after a knob's removal (correctness, side by side); run6m: rmsnorm fp16 again
#   run4d: the final side by side: the offline tuner under a budget (rmsnorm, softmax, cross_entropy),
#          then kernel quality of all ten tasks (starter, tuned, eager, torch.compile in fp16 and bf16)
#
# Usage on the device (carry .whl):
#   bash benchmarks/gpu_session.sh part1 | part2 [KQ_SECONDS] | gputests | harness | sweeps | run3a | run3b | run3c | run4a | run4b | run4c | run4d | run5a | run5b | run5c | run5d | run6a | run6b | run6c | run6d | run6e | run6f | run6g | run6h | run6i | run6j | run6k | run6l | run6m
set -u
part=${1:?part1, part2 or gputests}
if [ -d .whl ] && [ ! -d .site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
R=/tmp/res/$part; mkdir -p "$R"
step() {  # step NAME SECONDS CMD...: run with a hard limit, log to $R/NAME.log, print its tail
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$R/$name.log" 2>&1
    local rc=$?
    echo "== $name rc=$rc $((SECONDS - t0)) s"
    echo "$name rc=$rc $((SECONDS - t0))s" >> "$R/steps.txt"
    tar czf "$OUT/$part.tgz" -C "$R" .  # after every step: a call cut short keeps what it finished
}
sw() {  # sw NAME SECONDS ARGS...: a knob sweep as a step, starting no combination in its last 15 s
    local name=$1 limit=$2; shift 2
    step "sweep_$name" "$limit" python3 benchmarks/knob_sweep.py --max-seconds $((limit - 15)) \
        --json "$R/sweep_$name.json" "$@"
}
norms_measured() {  # after a norm sweep: the files measured, their correctness, Nsight at the misses under
    # compile (bf16, the last call only), both norms side by side
    local ncu probe t
    mkdir -p "$R/applied"
    for t in rmsnorm layernorm; do cp "kernels/$t/kernel.py" "$R/applied/$t.kernel.py.txt"; done
    step starters 80 python3 benchmarks/starters_check.py --tasks rmsnorm,layernorm --json "$R/starters.json"
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "rmsnorm large _rmsnorm" "layernorm gpt2-small-b32 _layernorm"; do
        set -- $probe
        step "ncu_$1_$2" 60 "$ncu" --clock-control none --profile-from-start off -k "regex:$3" --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
            python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16
    done
    step kernel_quality 250 python3 benchmarks/kernel_quality.py --tasks rmsnorm,layernorm --max-seconds 220 \
        --compile-dtypes float16,bfloat16 --json "$R/kernel_quality.json"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  git log -1 --format='commit %H %s' 2>/dev/null  # the copy's git metadata can lag its files:
  echo "files differing from that commit: $(git status --short 2>/dev/null | wc -l)"; } > "$R/env.txt" 2>&1
cat "$R/env.txt"
case $part in
part1)
    step starters 110 python3 benchmarks/starters_check.py --json "$R/starters.json"
    step harness_speed 120 python3 benchmarks/harness_speed.py --tasks rmsnorm --json "$R/harness_speed.json"
    step profile 55 python3 benchmarks/profile_models.py --out "$R/profile"
    step tuner 280 python3 benchmarks/tuner_budget.py --total-seconds 270 --save-kernels /tmp/res/tuned \
        --json "$R/tuner_budget.json"
    [ -d /tmp/res/tuned ] && cp -r /tmp/res/tuned "$R/tuned"
    ;;
part2)
    kd=(); [ -d /tmp/res/tuned ] && kd=(--kernel-dir /tmp/res/tuned)
    kq_s=${2:-320}  # what the session's device time allows
    step kernel_quality $((kq_s + 40)) python3 benchmarks/kernel_quality.py --max-seconds "$kq_s" "${kd[@]}" \
        --json "$R/kernel_quality.json"
    ;;
gputests)
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    ;;
harness)
    step harness_speed 200 python3 benchmarks/harness_speed.py --tasks rmsnorm --json "$R/harness_speed.json"
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    for mode in write read; do  # what the flush itself costs the timed kernel
        step "flush_$mode" 60 python3 benchmarks/kernel_quality.py --tasks rmsnorm,softmax,swiglu --dtypes bfloat16 \
            --no-compile --flush "$mode" --json "$R/flush_$mode.json"
    done
    ;;
run3a)
    step starters 110 python3 benchmarks/starters_check.py --json "$R/starters.json"
    step harness_speed 200 python3 benchmarks/harness_speed.py --tasks rmsnorm --json "$R/harness_speed.json"
    step tuner 190 python3 benchmarks/tuner_budget.py --total-seconds 170 --save-kernels /tmp/res/tuned \
        --json "$R/tuner_budget.json"
    ;;
run3b)
    kd=(); [ -d /tmp/res/tuned ] && kd=(--kernel-dir /tmp/res/tuned)
    step kernel_quality 300 python3 benchmarks/kernel_quality.py --max-seconds 260 "${kd[@]}" \
        --json "$R/kernel_quality.json"
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "rmsnorm wide _rmsnorm LOOP_PASS2_REVERSED=0" "rmsnorm wide _rmsnorm LOOP_PASS2_REVERSED=1" \
                 "softmax gpt2-vocab _softmax LOOP_PASS2_REVERSED=0" "softmax gpt2-vocab _softmax LOOP_PASS2_REVERSED=1" \
                 "cross_entropy llama7b-short _row_loss LANE_MAX=0" "cross_entropy llama7b-short _row_loss LANE_MAX=1"; do
        set -- $probe
        step "ncu_$1_$2_$4" 40 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,smsp__inst_executed.sum \
            python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16 "$4"
    done
    ;;
run3c)  # wide-row sweeps (best written into kernel.py), then correctness and quality of those starters
    sw softmax 45 --task softmax --shapes gpt2-vocab,llama7b-vocab --dtypes bfloat16 --apply-best \
        --grid LOOP_BLOCK_N=2048,4096,8192 --grid LOOP_NUM_WARPS=4,8,16
    for t in rmsnorm layernorm add_rmsnorm; do
        sw "$t" 40 --task "$t" --shapes wide --dtypes bfloat16 --apply-best \
            --grid LOOP_BLOCK_N=1024,2048,4096 --grid LOOP_NUM_WARPS=4,8,16
    done
    mkdir -p "$R/applied"; for t in softmax rmsnorm layernorm add_rmsnorm; do cp "kernels/$t/kernel.py" "$R/applied/$t.py"; done
    step starters 60 python3 benchmarks/starters_check.py --tasks softmax,rmsnorm,layernorm,add_rmsnorm \
        --json "$R/starters.json"
    step kernel_quality 90 python3 benchmarks/kernel_quality.py --tasks softmax,rmsnorm,layernorm,add_rmsnorm \
        --no-compile --max-seconds 70 --json "$R/kernel_quality.json"
    step harness_speed 150 python3 benchmarks/harness_speed.py --tasks rmsnorm --json "$R/harness_speed.json"
    ;;
run4a)
    b4=(--dtypes bfloat16 --apply-best)
    res=(--grid RESIDENT_BYTES_PER_THREAD=32,64,128 --grid MAX_FUSED_N=2048,16384)
    rows=(--grid ROW_BLOCK_ELEMS=2048,4096,8192,16384 --grid NUM_WARPS=4,8,16)
    sw softmax_res 70 "${b4[@]}" --task softmax --shapes gpt2-vocab,llama7b-vocab,odd,llama7b-attn "${res[@]}"
    sw rmsnorm_res 60 "${b4[@]}" --task rmsnorm --shapes wide,large,odd,llama7b-layer "${res[@]}"
    sw layernorm_res 60 "${b4[@]}" --task layernorm --shapes wide,large,odd,llama7b-layer "${res[@]}"
    sw add_rmsnorm_res 60 "${b4[@]}" --task add_rmsnorm --shapes wide,odd,llama7b-layer,llama7b-b4 "${res[@]}"
    sw cross_entropy 80 "${b4[@]}" --task cross_entropy --shapes llama7b,llama7b-short,gpt2-b1,odd,llama3-vocab \
        --grid BLOCK_V=4096,8192,16384 --grid NUM_WARPS=8,16,32
    # The rows path at the aligned shapes it still takes after the sweeps above.
    sw softmax_rows 60 "${b4[@]}" --task softmax --shapes gpt2-small-hidden,gpt2-attn-scores,llama7b-attn "${rows[@]}"
    sw rmsnorm_rows 50 "${b4[@]}" --task rmsnorm --shapes gpt2-small,llama7b-layer,large "${rows[@]}"
    sw layernorm_rows 60 "${b4[@]}" --task layernorm --shapes gpt2-small,gpt2-small-b32,llama7b-layer,large "${rows[@]}"
    sw add_rmsnorm_rows 50 "${b4[@]}" --task add_rmsnorm --shapes gpt2-small,llama7b-layer,llama7b-b4 "${rows[@]}"
    mkdir -p "$R/applied"
    for t in softmax rmsnorm layernorm add_rmsnorm cross_entropy; do cp "kernels/$t/kernel.py" "$R/applied/$t.kernel.py.txt"; done
    changed=softmax,rmsnorm,layernorm,add_rmsnorm,cross_entropy
    step starters 120 python3 benchmarks/starters_check.py --tasks "$changed" --json "$R/starters.json"
    step kernel_quality 120 python3 benchmarks/kernel_quality.py --tasks "$changed" --no-compile --max-seconds 100 \
        --json "$R/kernel_quality.json"
    step gpu_tests 100 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py \
        tests/engine/test_gpu_run.py -q -p no:cacheprovider
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "softmax gpt2-vocab _softmax" "rmsnorm wide _rmsnorm" "layernorm wide _layernorm" \
                 "cross_entropy llama7b-short _row_loss"; do
        set -- $probe
        step "ncu_$1_$2" 40 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section MemoryWorkloadAnalysis python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16
    done
    ;;
run4b)
    b4=(--dtypes bfloat16 --apply-best)
    loop=(--grid LOOP_NUM_STAGES=1,3,4 --grid LOOP_BLOCK_N=2048,4096,8192 --grid LOOP_NUM_WARPS=8,16)
    sw rmsnorm_loop 60 "${b4[@]}" --task rmsnorm --shapes wide --grid RESIDENT_MAX_KB=32 "${loop[@]}"
    sw layernorm_loop 60 "${b4[@]}" --task layernorm --shapes wide --grid RESIDENT_MAX_KB=32 "${loop[@]}"
    sw add_rmsnorm_loop 60 "${b4[@]}" --task add_rmsnorm --shapes wide --grid RESIDENT_MAX_KB=32 "${loop[@]}"
    sw softmax_vec 60 "${b4[@]}" --task softmax --shapes gpt2-vocab --grid RESIDENT_MAX_KB=64 --grid VEC_LOOP_NUM_STAGES=1,3,4 \
        --grid VEC_LOOP_BLOCK_N=2048,4096,8192 --grid VEC_LOOP_NUM_WARPS=8,16
    sw softmax_loop 60 "${b4[@]}" --task softmax --shapes llama7b-vocab --grid RESIDENT_MAX_KB=32 "${loop[@]}"
    sw cross_entropy 100 "${b4[@]}" --task cross_entropy --shapes llama7b,llama7b-short,gpt2-b1,llama3-vocab \
        --grid NUM_STAGES=1,3,4 --grid BLOCK_V=4096,8192 --grid NUM_WARPS=4,8,16
    mkdir -p "$R/applied"
    changed=softmax,rmsnorm,layernorm,add_rmsnorm,cross_entropy
    for t in ${changed//,/ }; do cp "kernels/$t/kernel.py" "$R/applied/$t.kernel.py.txt"; done
    step starters 120 python3 benchmarks/starters_check.py --tasks "$changed" --json "$R/starters.json"
    step kernel_quality 120 python3 benchmarks/kernel_quality.py --tasks "$changed" --no-compile --max-seconds 100 \
        --json "$R/kernel_quality.json"
    ;;
run4c)
    b4=(--dtypes bfloat16 --apply-best)
    sw softmax_vec 90 "${b4[@]}" --task softmax --shapes gpt2-vocab --grid VEC_LOOP_PROGRAMS_PER_SM=0,1,2,3 \
        --grid VEC_LOOP_NUM_STAGES=3,4,6 --grid VEC_LOOP_BLOCK_N=2048,4096 --grid VEC_LOOP_NUM_WARPS=8
    sw softmax_loop 80 "${b4[@]}" --task softmax --shapes llama7b-vocab --grid LOOP_PROGRAMS_PER_SM=0,1,2,3 \
        --grid LOOP_NUM_STAGES=1,3,4 --grid LOOP_BLOCK_N=4096,8192 --grid LOOP_NUM_WARPS=8
    for t in rmsnorm layernorm; do
        sw "${t}_loop" 80 "${b4[@]}" --task "$t" --shapes wide --grid LOOP_PROGRAMS_PER_SM=0,1,2,3 --grid LOOP_NUM_STAGES=1,3,4 \
            --grid LOOP_BLOCK_N=2048,4096 --grid LOOP_NUM_WARPS=16
    done
    sw cross_entropy 90 "${b4[@]}" --task cross_entropy --shapes llama7b,llama7b-short,gpt2-b1,odd,llama3-vocab \
        --grid SEGMENT_PROGRAMS_PER_SM=0,16,32 --grid NUM_WARPS=4,8 --grid BLOCK_V=4096,8192
    mkdir -p "$R/applied"
    changed=softmax,rmsnorm,layernorm,cross_entropy
    for t in ${changed//,/ }; do cp "kernels/$t/kernel.py" "$R/applied/$t.kernel.py.txt"; done
    step starters 120 python3 benchmarks/starters_check.py --tasks "$changed" --json "$R/starters.json"
    step tuner 170 python3 benchmarks/tuner_budget.py --tasks rmsnorm softmax cross_entropy --total-seconds 150 \
        --save-kernels "$R/tuned" --json "$R/tuner_budget.json"
    ;;
run4d)  # the final side by side, on the committed starters
    step tuner 130 python3 benchmarks/tuner_budget.py --tasks rmsnorm softmax cross_entropy --total-seconds 110 \
        --save-kernels "$R/tuned" --json "$R/tuner_budget.json"
    kd=(); [ -d "$R/tuned" ] && kd=(--kernel-dir "$R/tuned")
    step kernel_quality 400 python3 benchmarks/kernel_quality.py --max-seconds 330 --compile-dtypes float16,bfloat16 \
        "${kd[@]}" --json "$R/kernel_quality.json"
    ;;
run5a)  # the offline tuner on all ten starters (tuned kernels kept in /tmp/res/tuned for run5b)
    step starters 60 python3 benchmarks/starters_check.py --tasks layernorm,add_rmsnorm --json "$R/starters.json"
    step tuner 530 python3 benchmarks/tuner_budget.py --tasks all --budget 80 --total-seconds 500 \
        --save-kernels /tmp/res/tuned --json "$R/tuner_budget.json"
    [ -d /tmp/res/tuned ] && cp -r /tmp/res/tuned "$R/tuned"
    ;;
run5b)  # then, on the same warm machine, the side by side of all ten with those tuned kernels
    kd=(); [ -d /tmp/res/tuned ] && kd=(--kernel-dir /tmp/res/tuned)
    step kernel_quality 480 python3 benchmarks/kernel_quality.py --max-seconds 440 --compile-dtypes float16,bfloat16 \
        "${kd[@]}" --json "$R/kernel_quality.json"
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    ;;
run5c)  # layernorm after its rows-path warps rule (16-bit rows wider than the block get warps in proportion)
    step starters 40 python3 benchmarks/starters_check.py --tasks layernorm --json "$R/starters.json"
    step kernel_quality 200 python3 benchmarks/kernel_quality.py --tasks layernorm --max-seconds 170 \
        --compile-dtypes float16,bfloat16 --json "$R/kernel_quality.json"
    ;;
run5d)  # the harness's A/A false-keep and 3% detection rates with keeps confirmed (first-pass counts beside)
    step harness_speed 260 python3 benchmarks/harness_speed.py --tasks rmsnorm,softmax --runs 3 \
        --json "$R/harness_speed.json"
    ;;
run6a)  # sweeps: second pass backwards vs forwards, per-lane maxima vs a row max per chunk, warps per row
    for t in rmsnorm layernorm; do
        sw "$t" 50 --task "$t" --shapes wide --dtypes bfloat16 --apply-best \
            --grid LOOP_PASS2_REVERSED=0,1 --grid LOOP_NUM_WARPS=8,16,32 --grid LOOP_BLOCK_N=2048,4096
    done
    sw add_rmsnorm 50 --task add_rmsnorm --shapes wide --dtypes bfloat16 --apply-best \
        --grid RESIDENT_MAX_KB=0,128 --grid LOOP_PASS2_REVERSED=0,1 --grid LOOP_NUM_WARPS=8,16,32
    sw softmax 90 --task softmax --shapes gpt2-vocab,llama7b-vocab --dtypes bfloat16 --apply-best \
        --grid LANE_MAX=0,1 --grid LOOP_PASS2_REVERSED=0,1 --grid VEC_LOOP_NUM_WARPS=8,16 --grid LOOP_NUM_WARPS=8,16
    sw cross_entropy 80 --task cross_entropy --dtypes bfloat16 --apply-best \
        --grid LANE_MAX=0,1 --grid NUM_WARPS=4,8 --grid BLOCK_V=2048,4096
    mkdir -p "$R/applied"
    for t in rmsnorm layernorm add_rmsnorm softmax cross_entropy; do
        cp "kernels/$t/kernel.py" "$R/applied/$t.kernel.py.txt"
    done
    step starters 90 python3 benchmarks/starters_check.py --tasks rmsnorm,layernorm,add_rmsnorm,softmax,cross_entropy \
        --json "$R/starters.json"
    ;;
run6b)  # run6a's winners (committed) and cross-entropy's fused mean (swept first, applied when 1% better):
        # those five starters side by side, then Nsight Compute of both settings of each new knob
    sw cross_entropy_fused 40 --task cross_entropy --dtypes bfloat16 --apply-best --grid FUSED_MEAN=0,1
    mkdir -p "$R/applied"; cp kernels/cross_entropy/kernel.py "$R/applied/cross_entropy.kernel.py.txt"
    step kernel_quality 300 python3 benchmarks/kernel_quality.py --tasks rmsnorm,layernorm,add_rmsnorm,softmax,cross_entropy \
        --max-seconds 270 --compile-dtypes float16,bfloat16 --json "$R/kernel_quality.json"
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "rmsnorm wide _rmsnorm LOOP_PASS2_REVERSED=0" "rmsnorm wide _rmsnorm LOOP_PASS2_REVERSED=1" \
                 "cross_entropy llama7b-short _row_loss LANE_MAX=0" "cross_entropy llama7b-short _row_loss LANE_MAX=1"; do
        set -- $probe
        step "ncu_$1_$2_$4" 45 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
            python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16 "$4"
    done
    ;;
run6c)  # cross-entropy's lane width (fp32 lanes of 4 logits regressed in run6b) swept with per-lane maxima on
        # and off, then its fused mean with a kept counter (no memset launch), winners applied; its correctness;
        # Nsight Compute of softmax at the shapes that miss and of fp32 cross-entropy lanes of 4 vs 8; then the
        # side by side of all ten starters, each shape beside a copy of the same bytes. (Ran on tree c74b22e:
        # LANE_ELEMS and FUSED_MEAN 2 were removed after it, see docs/benchmarks.md run 6; the ncu probes of
        # fp32 lanes ran after the sweep had set LANE_MAX=0, so both profiled the row-max kernel.)
    step starters 40 python3 benchmarks/starters_check.py --tasks cross_entropy --json "$R/starters.json"
    sw cross_entropy_lanes 75 --task cross_entropy --dtypes float32,bfloat16 --apply-best \
        --grid LANE_MAX=0,1 --grid LANE_ELEMS=8,16
    sw cross_entropy_fused 40 --task cross_entropy --dtypes bfloat16 --apply-best --grid FUSED_MEAN=0,1,2
    mkdir -p "$R/applied"; cp kernels/cross_entropy/kernel.py "$R/applied/cross_entropy.kernel.py.txt"
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "softmax odd _softmax bfloat16 LANE_MAX=1" "softmax gpt2-small-hidden _softmax bfloat16 LANE_MAX=1" \
                 "softmax gpt2-vocab _softmax bfloat16 LANE_MAX=1" \
                 "cross_entropy gpt2-b1 _row_loss float32 LANE_ELEMS=4" "cross_entropy gpt2-b1 _row_loss float32 LANE_ELEMS=8"; do
        set -- $probe
        step "ncu_$1_$2_$4_$5" 20 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
            python3 benchmarks/ncu_probe.py "$1" "$2" "$4" "$5"
    done
    step kernel_quality 330 python3 benchmarks/kernel_quality.py --max-seconds 300 --compile-dtypes float16,bfloat16 \
        --json "$R/kernel_quality.json"
    ;;
run6d)  # the two starters changed after run6c: cross-entropy (16-bit lanes, fp32 row max, two launches) and
        # matmul (TMA_FLATTEN 1, run 5's confirmed keep); softmax's resident path at 3001x5003 (144 registers,
        # 19% occupancy, issue-bound in run6c's Nsight) swept over warps per row; correctness at full shapes,
        # then side by side; GPU-marked tests
    sw softmax_resident 40 --task softmax --shapes odd --dtypes bfloat16,float32 --apply-best \
        --grid RESIDENT_BYTES_PER_THREAD=32,64,128 --grid RESIDENT_PART_KB=16,32
    mkdir -p "$R/applied"; cp kernels/softmax/kernel.py "$R/applied/softmax.kernel.py.txt"
    step starters 80 python3 benchmarks/starters_check.py --tasks cross_entropy,matmul,softmax --json "$R/starters.json"
    step kernel_quality 300 python3 benchmarks/kernel_quality.py --tasks cross_entropy,matmul,softmax --max-seconds 270 \
        --compile-dtypes float16,bfloat16 --json "$R/kernel_quality.json"
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    ;;
run6e)  # profiles of the misses run 6 had no Nsight data for (bf16): rmsnorm 16384x8192 and layernorm 32768x768
        # (under torch.compile), matmul 3000x5000x1000, cross-entropy 4096x32000; softmax 3001x5003 again with
        # the pipes' utilisation; a matmul sweep at 3000x5000x1000, which takes the big tiles (128x256 fill
        # 91% of its waves, so the SMALL_* knobs never reach it): the wave-fill threshold (95 sends it to the
        # small tiles), stages and tile grouping (not applied)
    sw matmul_odd 90 --task matmul --shapes odd --dtypes float16,bfloat16 \
        --grid MIN_WAVE_FILL_PCT=85,95 --grid NUM_STAGES=3,4 --grid GROUP_M=8,16
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    sections=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis
              --section LaunchStats --section InstructionStats)
    bytes=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
    pipes=sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
    for probe in "rmsnorm large _rmsnorm" "layernorm gpt2-small-b32 _layernorm" "matmul odd _matmul" \
                 "cross_entropy llama7b _row_loss" "softmax odd _softmax"; do
        set -- $probe
        step "ncu_$1_$2" 25 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            "${sections[@]}" --metrics "$bytes" python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16
        step "ncu_pipes_$1_$2" 25 "$ncu" --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
            --metrics "$pipes" python3 benchmarks/ncu_probe.py "$1" "$2" bfloat16
    done
    # ...and what they are measured against: Inductor's kernels (max-autotune) for the two misses under
    # compile, cuBLAS for matmul; one call each, after the warm-up and autotuning, in a profiler range
    for probe in "compile rmsnorm large triton_" "compile layernorm gpt2-small-b32 triton_" \
                 "eager matmul odd gemm|nvjet|xmma|cutlass"; do
        set -- $probe
        step "ncu_$1_$2_$3" 120 "$ncu" --clock-control none --profile-from-start off -k "regex:$4" --launch-count 3 \
            "${sections[@]}" --metrics "$bytes,$pipes" python3 benchmarks/ncu_probe.py --run "$1" "$2" "$3" bfloat16
    done
    ;;
run6f)  # the two misses under torch.compile, after run6e's Nsight (ours 52-54 registers and 50-56% occupancy,
        # Inductor's 23-32 registers and 100%, same bytes): rows-path warps and row block, rmsnorm's resident
        # path for 8192-wide rows; every shape, not applied (kernel_quality after the choice)
    sw rmsnorm 150 --task rmsnorm --dtypes bfloat16 \
        --grid NUM_WARPS=8,16 --grid MAX_FUSED_N=4096,16384 --grid RESIDENT_BYTES_PER_THREAD=32,64,128
    sw layernorm 150 --task layernorm --dtypes bfloat16 \
        --grid NUM_WARPS=4,8,16 --grid ROW_BLOCK_ELEMS=2048,4096,8192
    ;;
run6g)  # run6e profiled Inductor under max-autotune, but kernel_quality compiles memory-bound references in
        # default mode: those two probes again as measured; rmsnorm's 8192-wide rows on the looped path
        # (two passes, the second from L2, as Inductor's kernel does) swept at the widths it would take
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for probe in "rmsnorm large" "layernorm gpt2-small-b32"; do
        set -- $probe
        step "ncu_compile_$1_$2" 120 "$ncu" --clock-control none --profile-from-start off -k "regex:triton_" \
            --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
            python3 benchmarks/ncu_probe.py --run compile "$1" "$2" bfloat16
    done
    sw rmsnorm_looped 120 --task rmsnorm --shapes odd,large --dtypes float16,bfloat16 --grid MAX_FUSED_N=4096 \
        --grid RESIDENT_MAX_KB=8 --grid LOOP_BLOCK_N=1024,2048,4096 --grid LOOP_NUM_WARPS=4,8,16
    # Inductor's source for both (its chunk, rows per program and warps), and the looped path at the one
    # shape it misses, with both pass-2 directions (the geomean above mixes in odd, where resident wins)
    for probe in "rmsnorm large" "layernorm gpt2-small-b32"; do
        set -- $probe
        step "inductor_code_$1_$2" 120 env TORCH_LOGS=output_code python3 benchmarks/ncu_probe.py --run compile "$1" "$2" bfloat16
    done
    sw rmsnorm_looped_large 100 --task rmsnorm --shapes large --dtypes bfloat16 --grid MAX_FUSED_N=4096 \
        --grid RESIDENT_MAX_KB=8 --grid LOOP_BLOCK_N=1024,2048,4096 --grid LOOP_NUM_WARPS=8,16 --grid LOOP_PASS2_REVERSED=0,1
    ;;
run6h)  # after run6g's Inductor source: its rmsnorm walks 8192-wide rows in chunks, twice (32
        # registers, 16 warps, 100% occupancy, 125 us in Nsight vs our 130), its layernorm at 32768x768 is one
        # warp per row (no cross-warp reduction; ours spreads each row over 4 warps). Swept here: rmsnorm's rows
        # path in chunks (ROWS_CHUNK_N, new) and its warps per row block, layernorm's rows path down to one warp
        # per row; winners applied (copies in applied/), then correctness, Nsight of both, side by side, GPU tests
    sw rmsnorm_chunked 90 --task rmsnorm --shapes llama7b-layer,odd,large --dtypes bfloat16,float32 --apply-best \
        --grid ROWS_CHUNK_N=0,1024,2048,4096 --grid CHUNK_NUM_WARPS=4,8,16
    sw rmsnorm_rows 90 --task rmsnorm --dtypes bfloat16,float32 --apply-best \
        --grid ROW_BLOCK_ELEMS=1024,2048,4096,8192 --grid NUM_WARPS=1,2,4,8
    sw layernorm_rows 90 --task layernorm --dtypes bfloat16 --apply-best \
        --grid ROW_BLOCK_ELEMS=1024,2048,4096 --grid NUM_WARPS=1,2,4
    norms_measured
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    ;;
run6i)  # run6h: at 32 registers and 100% occupancy (16 warps) our rmsnorm 16384x8192 still ran 129.4 us in Nsight
        # against Inductor's 125.1 (same bytes), so occupancy was not the gap; Inductor's kernels also index in
        # 32 bits and mark x's last read evict-first. Both swept on the rows paths (ROWS_INT32, ROWS_EVICT_FIRST,
        # new), with the chunked rows at 4096 x 16 warps (run6h's best there); winners applied; correctness,
        # Nsight, side by side. (Ran on tree 6e90be5: ROWS_EVICT_FIRST, geomean 0.97-0.98x, was removed after.)
    sw rmsnorm_rows 90 --task rmsnorm --dtypes bfloat16,float32 --apply-best \
        --grid ROWS_INT32=0,1 --grid ROWS_EVICT_FIRST=0,1 --grid ROWS_CHUNK_N=0,4096 --grid CHUNK_NUM_WARPS=16
    sw layernorm_rows 60 --task layernorm --dtypes bfloat16,float32 --apply-best \
        --grid ROWS_INT32=0,1 --grid ROWS_EVICT_FIRST=0,1
    norms_measured
    ;;
run6j)  # run6i's winners applied by hand (32-bit offsets on: layernorm 32768x768 3% faster, neutral elsewhere;
        # evict-first x 3-9% slower at the big shapes, off); rmsnorm's chunked rows now only where chunks tile the row
        # (run6h/6i: 4096 x 16 warps 2.4% faster at 16384x8192, slower at 6001x5120 where the second chunk
        # was three quarters masked): swept again, applied; correctness, Nsight, side by side of both norms
    sw rmsnorm_chunked 90 --task rmsnorm --dtypes bfloat16,float32 --apply-best \
        --grid ROWS_CHUNK_N=0,1024,2048,4096 --grid CHUNK_NUM_WARPS=4,8,16
    norms_measured
    step gpu_tests 90 python3 -m pytest -m gpu tests/harness/test_gpu.py tests/profiling/test_gpu.py -q -p no:cacheprovider
    ;;
run6k)  # the tree as it stands after run 6 (rmsnorm's 4096-wide chunks set by hand from run6j's sweep): its
        # correctness, then the side by side of all ten starters in one run, each shape beside a same-size copy
    step starters 60 python3 benchmarks/starters_check.py --tasks rmsnorm,layernorm --json "$R/starters.json"
    step kernel_quality 400 python3 benchmarks/kernel_quality.py --max-seconds 370 --compile-dtypes float16,bfloat16 \
        --json "$R/kernel_quality.json"
    ;;
run6l)  # the norms after ROWS_EVICT_FIRST's removal (the kernels run 6k measured, less the dead branch):
        # correctness at full shapes and their side by side again. (Its rmsnorm fp16 gpt2-small and odd starter
        # timings came back disturbed, p20-p80 10-33 and 106-206 us: run6m, not yet run, measures them again.)
    step starters 60 python3 benchmarks/starters_check.py --tasks rmsnorm,layernorm --json "$R/starters.json"
    step kernel_quality 250 python3 benchmarks/kernel_quality.py --tasks rmsnorm,layernorm --max-seconds 220 \
        --compile-dtypes float16,bfloat16 --json "$R/kernel_quality.json"
    ;;
run6m)  # rmsnorm fp16 again (run6l's disturbed timings), with compile beside it. Not run yet: run 6's device
        # time ran out before it
    step kernel_quality 120 python3 benchmarks/kernel_quality.py --tasks rmsnorm --dtypes float16 --max-seconds 100 \
        --compile-dtypes float16 --json "$R/kernel_quality.json"
    ;;
sweeps)
    sw matmul 150 --task matmul --shapes gpt2-qkv,gpt2-mlp-down,odd --dtypes float16,bfloat16 \
        --grid SMALL_BLOCK_N=128,256 --grid SMALL_NUM_STAGES=3,4 --grid SMALL_PROGRAMS_PER_SM=0,1,2
    sw rmsnorm 50 --task rmsnorm --shapes wide --dtypes bfloat16 \
        --grid WIDE_INFLIGHT_MB=0,12,24,36 --grid LOOP_BLOCK_N=2048,4096,8192 --grid NUM_WARPS=4,8,16
    sw softmax 60 --task softmax --shapes gpt2-vocab,llama7b-vocab --dtypes bfloat16 \
        --grid WIDE_INFLIGHT_MB=0,12,24,36 --grid LOOP_BLOCK_N=2048,4096,8192 --grid LOOP_NUM_WARPS=8,16
    sw layernorm 50 --task layernorm --shapes wide --dtypes bfloat16 \
        --grid WIDE_INFLIGHT_MB=0,12,24,36 --grid LOOP_BLOCK_N=2048,4096 --grid LOOP_NUM_WARPS=4,8
    sw add_rmsnorm 50 --task add_rmsnorm --shapes wide --dtypes bfloat16 \
        --grid WIDE_INFLIGHT_MB=0,12,24,36 --grid LOOP_BLOCK_N=2048,4096 --grid LOOP_NUM_WARPS=4,8
    sw matmul_fp32 60 --task matmul --shapes square-4096,odd --dtypes float32 \
        --grid FP32_BLOCK_N=64,128,256 --grid FP32_BLOCK_K=16,32 --grid FP32_NUM_WARPS=4,8
    sw attention 60 --task flash_attention --shapes llama7b-s4096,llama7b-b4-s2048,llama-gqa-s4096 --dtypes bfloat16 \
        --grid BLOCK_N=64,128 --grid NUM_STAGES=2,3 --grid MAX_REGS=0,128
    ;;
esac
tar czf "$OUT/$part.tgz" -C "$R" .
for f in "$R"/*.log; do echo "---- $(basename "$f")"; tail -n "${TAIL_LINES:-25}" "$f"; done
cat "$R/steps.txt"
