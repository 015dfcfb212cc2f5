#!/usr/bin/env bash
# gpu_run.sh — runs ON the GPU machine (device tool), from the repository root, with .gpu/ carried
# (tools/gpu_pack.sh builds it here): every GPU test, then the benchmarks the open issues ask for,
# each under a time limit, all output under $OUT (default ./gpu-out). A device call runs at most
# 600 s; measured 2026-11-30: tests 15 s, bench 4 min (every synthetic model is generated anew),
# oss 50 s, real 20 s, bw 30 s, offload ~7 min (give it its own call):
#   run(command="tools/gpu_run.sh tests", carry=[".gpu"])
# Parts (any order, several at once):
#   tests    test_gpu_ops, test_gpu_model, test_gpu_residency                 -> tests.log
#   bench    #5 resident tg/pp; #9 the CPU executor on the host's 16 cores for MXFP4/NVFP4/Q4_K;
#            bench_ggml                                                    -> bench.log
#   oss      #9 gpt-oss-20b / 120b (MXFP4) offloaded under a VRAM limit     -> oss.log
#   real     #10 the real model (parts from tools/gpu_model_chunks.sh; carry .gpu and .whl):
#            test_real_model.py --backend cuda, ft bench on it (cuda; cpu 16 threads) -> real.log
#   offload  #8 hybrid/cpu/offload at 30G, hybrid at 12G (uniform routing, tg128);
#            #7 sticky:0.8 routing at 24G                                    -> offload.log
#   long     #7 pp4096 at 30G with 512-, 2048- and 4096-token passes (-b); at 24G, 12G -> long.log
#   profile  #5/#7/#8 per-op GPU time (FT_GPU_PROFILE=1) of decode and prefill: resident pp512,
#            offloaded pp4096 at 30G in one 4096-token pass; hybrid decode at 30G with the host
#            side of each layer step                                          -> profile.log
#   tm64     #5 the grouped GEMM with 64-row tiles (FT_MOE_TM=64): test_gpu_model with it, then
#            resident pp512 with 32- and 64-row tiles alternated, and the 30G pp4096 pass -> tm64.log
#   exec     #9 the executor's scaling: bench_exec mxfp4 at 1, 8, 16 threads, nvfp4 and bf16 at 16
#            (experts rotating over 3x the L3); then row pairs on/off alternated -> exec.log
#   execab   #8/#9 the executor's switches at 16 threads, alternated three times: as built,
#            FT_X32_VBMI=0 and =3, FT_X32_PF=4096, the AVX2 tier (--isa 2), and
#            MXFP4 in gpt-oss-20b's expert shape (H = I = 2880, top-4)      -> execab.log
#   exec2    #9 in brief: bench_exec mxfp4/nvfp4 at 16 and 14 threads, alternated -> exec.log
#   ncu      #5 Nsight Compute per-kernel time + DRAM bytes of resident decode; memcheck of the
#            op tests (Firecracker kinds only: kind nvidia-h200-x2)          -> ncu.log, sanitize.log
#   decab    #5 resident decode A/B: as built vs ft_old (OLD_REV), alternated on 12 layers,
#            then on 48; FT_STEP_TIMING's split                              -> decab.log
#   hybprof  #8 hybrid decode at 30G, host side per layer step (FT_GPU_PROFILE) -> hybprof.log
#   sampab   #5 sampled decode on 12 layers: greedy; t 0.8 and Qwen's defaults, each on the
#            device and on the host (FT_ENGINE_DRAW=0), alternated; 48 layers   -> sampab.log
#   hybab    #8 hybrid at 30G: as built vs ft_old (OLD_REV), alternated       -> hybab.log
#   hybenv   #8 hybrid at 30G, the defaults against each AB_ENVS setting, in one process
#            (ft bench --env/--cycles; one ~48 s load instead of one a run)   -> hybenv.log
#   hyb3     #8 hybrid / cpu / offload at 12G, 24G, 30G (tg64), one process      -> hyb3.log
#   splitab  #8 the split as built against FT_SPLIT_RATES=1 FT_SPLIT_COPY_END=0 (as before
#            f6f5fe8) and FT_SPLIT_COPY_END=0, hybrid and cpu at 24G and 30G, one process,
#            alternated SPLIT_CYCLES times (default 2)                         -> splitab.log
#   tg128    #8's own command: the three backends at 30G, tg128 and pp512, 3 repetitions -> tg128.log
#   execpf   #9 the executor from the cache (bench_exec --experts 8: the kernels' compute rate at
#            16 threads) for mxfp4/nvfp4/bf16, then MXFP4 from DRAM with FT_X32_PF 4096, 16384
#            (the default), 65536 bytes of prefetch distance, alternated twice  -> execpf.log
#   hyb3env  hyb3 with the defaults against each AB_ENVS setting, alternated AB_CYCLES times
#            (default 2), one process                                       -> hyb3env.log
#   hyb3x    the same, one process per combination (~60 s each: the load)         -> hyb3.log
#   pfsweep  #9 the kernels from the cache; MXFP4/NVFP4 at prefetch distances 2-16 KB, both
#            shapes, three rounds                                         -> pfsweep.log
#   mxgab    #9 one token's MXFP4/NVFP4 rows by groups against FT_X32_MXG=0, from the
#            cache and DRAM, alternated three times                        -> mxgab.log
#   cpu9     #9 whole-model CPU decode, gpt-oss-20b and Qwen3-30B-A3B MXFP4/NVFP4 -> cpu9.log
#   cpuab    #9 whole-model CPU decode, as built against .gpu/ft_old (OLD_REV), twice -> cpuab.log
#   claimab  the pool's claimed tasks against FT_POOL_CLAIM=0, bench_exec, six rounds -> claimab.log
#   execenv  #9 bench_exec from DRAM under each EXEC_ENVS setting, alternated    -> execenv.log
#   exec9    #9's condition as built: MXFP4/NVFP4 (both shapes) from DRAM, five rounds -> exec9.log
#   isa      #9 bench_isa: the clock and zmm instruction throughput, 1 and 16 threads -> isa.log
#   pairab   #9 whole-chunk rows by groups in pairs against FT_X32_PAIR_FULL=0, three rounds -> pairab.log
#   cpuall   #8 --moe-backend cpu with every expert on the CPU (48 CPU layers; 8 slots)   -> cpuall.log
#   lat      #8 bench_latency: host<->GPU wake-up (stream sync, mapped flag, gate release) idle,
#            beside DRAM-streaming threads, beside H2D copies, after idle gaps  -> lat.log
#   keepab   #8 hybrid at 30G and 24G, the defaults against FT_KEEPALIVE=1, alternated three
#            times in one process, with FT_STEP_TIMING=1's one clock           -> keepab.log
#   bw       ft bench bw for bf16, mxfp4, nvfp4, q4_k experts; bench_exec (the
#            executor sustained) for mxfp4, nvfp4, fp8, q4_k, bf16             -> bw.log
# Each command's exit status is logged; a failing one does not stop the rest.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" /work
[ -e /work/main ] || ln -s "$PWD" /work/main # tests read tests/data by absolute path
export LD_LIBRARY_PATH=$PWD/.gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FREETOKEN_CACHE=$OUT/cache
G=.gpu

step() { # step LOG SECONDS CMD...: runs CMD with a limit, appends its output and status to LOG
    local log=$1 secs=$2
    shift 2
    echo "=== $(date +%T) $*" >>"$OUT/$log"
    timeout "$secs" "$@" >>"$OUT/$log" 2>&1
    echo "=== exit $? after $SECONDS s" >>"$OUT/$log"
}

ab() { # ab LOG LABEL ROUNDS BENCH-ARGS...: ft bench as built, as built with each switch of
    # AB_ENVS (e.g. AB_ENVS="FT_SPAN_GATE=1 FT_MAPPED_STAGING=0"), and as .gpu/ft_old (when
    # packed), alternated ROUNDS times, each with FT_STEP_TIMING=1 (where each step's time went)
    local log=$1 label=$2 rounds=$3 round cfg bin envs e cfgs=("ft FT_AB=new")
    shift 3
    for e in ${AB_ENVS:-}; do cfgs+=("ft $e"); done
    cfgs+=("ft_old FT_AB=old")
    for round in $(seq "$rounds"); do
        for cfg in "${cfgs[@]}"; do
            read -r bin envs <<<"$cfg"
            [ -x "$G/$bin" ] || continue
            echo "### $label $round $bin $envs" >>"$OUT/$log"
            FT_STEP_TIMING=1 step "$log" 200 env "$envs" "$G/$bin" bench "$@"
        done
    done
}

exec_ab() { # exec_ab LOG VAR ROUNDS CFG...: bench_exec with VAR=1 then VAR=0, ROUNDS times, for each
    # CFG "THREADS EXPERTS FORMAT": EXPERTS 0 rotates over 3x the L3 (from DRAM), L2 one small
    # expert (the kernels' own rate), N the same N experts every step (from the cache); FORMAT
    # gptoss is MXFP4 in gpt-oss-20b's expert shape
    local log=$1 var=$2 rounds=$3 round v cfg t e f sh
    shift 3
    for round in $(seq "$rounds"); do
        for v in 1 0; do
            for cfg in "$@"; do
                read -r t e f <<<"$cfg"
                sh=(--experts $e --format $f)
                [ $e = 0 ] && sh=(--format $f)
                [ $e = L2 ] && sh=(--format $f --experts 1 -k 1 --hidden 1024 --expert-width 512)
                [ $f = gptoss ] && sh=(--format mxfp4 --hidden 2880 --expert-width 2880 -k 4)
                echo "### $round $var=$v threads $t experts $e $f" >>"$OUT/$log"
                step "$log" 60 env "$var=$v" $G/bench_exec --threads $t --steps 300 "${sh[@]}"
            done
        done
    done
}

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
lscpu >"$OUT/lscpu.txt" 2>&1
for part in "$@"; do
    case $part in
    tests)
        step tests.log 300 $G/test_gpu_ops
        step tests.log 400 $G/test_gpu_model
        step tests.log 200 $G/test_gpu_residency
        ;;
    bench)
        step bench.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 128 -r 3 --backend cuda
        for f in gpt-oss-20b qwen3-30b-a3b:mxfp4 qwen3-30b-a3b:nvfp4 qwen3-30b-a3b:q4_k; do
            step bench.log 300 $G/ft bench --synthetic "$f" --backend cpu -t 16 -p 512 -n 64 -r 2
        done
        step bench.log 200 $G/bench_ggml --threads 16 --mib 2048
        ;;
    oss)
        # #9: gpt-oss (MXFP4 experts) offloaded: a VRAM limit below the experts' size
        step oss.log 240 $G/ft bench --synthetic gpt-oss-20b -p 512 -n 64 -r 1 \
            --backend offload --vram-limit 8G
        step oss.log 300 $G/ft bench --synthetic gpt-oss-120b -p 512 -n 64 -r 1 \
            --backend offload --vram-limit 24G
        ;;
    offload)
        # #8's three backends at 30G (llama.cpp's --n-cpu-moe 24 point), then hybrid at 24G/12G;
        # #7's skewed, temporally correlated routing at 24G
        for mode in hybrid cpu offload; do
            step offload.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 128 -r 1 \
                --backend offload --vram-limit 30G --moe-backend "$mode"
        done
        step offload.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 128 -r 1 \
            --backend offload --vram-limit 12G
        step offload.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 64 -r 1 \
            --backend offload --vram-limit 24G --synthetic-routing sticky:0.8
        ;;
    long)
        # #7: a 4096-token prompt at 30G (prefill streams the uncached experts once per chunk)
        for b in 512 2048 4096; do
            step long.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 4096 -n 16 -r 1 -b $b \
                --backend offload --vram-limit 30G
        done
        for v in 24G 12G; do
            step long.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 4096 -n 16 -r 1 \
                --backend offload --vram-limit $v
        done
        ;;
    profile)
        FT_GPU_PROFILE=1 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 32 -r 1 \
            --backend cuda
        FT_GPU_PROFILE=1 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 4096 -n 8 -r 1 \
            -b 4096 --backend offload --vram-limit 30G
        # #8: hybrid decode at 30G, with the host side of each layer step
        FT_GPU_PROFILE=1 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 0 -n 64 -r 1 \
            --backend offload --vram-limit 30G --moe-backend hybrid
        ;;
    tm64)
        FT_MOE_TM=64 step tm64.log 400 $G/test_gpu_model
        for tm in 32 64 32 64; do
            FT_MOE_TM=$tm step tm64.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 0 -r 3 \
                --backend cuda
        done
        for tm in 32 64; do
            FT_MOE_TM=$tm step tm64.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 4096 -n 0 -r 1 \
                -b 4096 --backend offload --vram-limit 30G
        done
        ;;
    exec)
        for t in 1 8 16; do step exec.log 120 $G/bench_exec --format mxfp4 --threads $t --steps 300; done
        for f in nvfp4 bf16; do step exec.log 120 $G/bench_exec --format $f --threads 16 --steps 300; done
        # threads: some 16-thread runs carry a stall (a worker starting 30-80 us late each
        # step; under gVisor affinity is not enforced and the Sentry needs CPU too): does
        # leaving a core or two free remove it? Alternated twice
        for t in 16 15 14 12 16 15 14 12; do
            echo "### threads $t" >>"$OUT/exec.log"
            step exec.log 60 $G/bench_exec --format mxfp4 --threads $t --steps 300
        done
        # row pairs for one token's short rows (default) against FT_X32_PAIR=0, alternated;
        # fixed tiles (FT_EXEC_GUIDE=0) once; bench_exec's phase breakdown in each
        for cfg in "1 1" "0 1" "1 1" "0 1" "1 1" "0 1" "1 0"; do
            read -r pair guide <<<"$cfg"
            for f in mxfp4 nvfp4; do
                echo "### pair $pair guide $guide $f" >>"$OUT/exec.log"
                FT_X32_PAIR=$pair FT_EXEC_GUIDE=$guide step exec.log 60 \
                    $G/bench_exec --format $f --threads 16 --steps 300
            done
        done
        ;;
    exec2)
        # #9 in brief: bench_exec MXFP4 and NVFP4 at 16 and 14 threads, alternated twice (does
        # leaving two cores free remove the 16-thread runs' stall?)
        for t in 16 14 16 14; do
            for f in mxfp4 nvfp4; do
                echo "### threads $t $f" >>"$OUT/exec.log"
                step exec.log 60 $G/bench_exec --format $f --threads $t --steps 300
            done
        done
        ;;
    execab)
        # #8/#9: this build's executor switches at 16 threads, alternated three times: as built;
        # FT_X32_VBMI=0 (MXFP4's block scales converted one by one, as before the VBMI permutes);
        # FT_X32_PF=4096 (a quarter of the default prefetch distance: ahead in execpf's call);
        # the AVX2 tier (--isa 2: on the dev VM's Zen 4 it reads MXFP4 as fast as AVX-512)
        for round in 1 2 3; do
            for cfg in "FT_AB=built mxfp4 nvfp4 bf16" "FT_X32_VBMI=0 mxfp4" "FT_X32_VBMI=3 mxfp4" \
                       "FT_X32_PF=4096 mxfp4 nvfp4" "FT_AB=avx2 mxfp4 nvfp4" "FT_AB=gptoss mxfp4"; do
                read -r envs fmts <<<"$cfg"
                isa=()
                [ "$envs" = FT_AB=avx2 ] && isa=(--isa 2)
                # gpt-oss-20b's expert shape (MXFP4's own model: H = I = 2880, top-4)
                [ "$envs" = FT_AB=gptoss ] && isa=(--hidden 2880 --expert-width 2880 -k 4)
                for f in $fmts; do
                    echo "### $round $envs $f" >>"$OUT/execab.log"
                    step execab.log 60 env "$envs" $G/bench_exec --format $f --threads 16 --steps 300 "${isa[@]}"
                done
            done
        done
        ;;
    ncu)
        # #5: each kernel of resident decode, timed by Nsight Compute with its DRAM bytes (run on
        # a Firecracker kind, nvidia-h200-x2: under gVisor ncu cannot read the counters), and the
        # GPU op tests under compute-sanitizer's memcheck
        NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        step ncu.log 330 "$NCU" --clock-control none --launch-skip 1500 --launch-count 700 --csv \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread \
            $G/ft bench --synthetic qwen3-30b-a3b -p 0 -n 48 -r 1 --backend cuda
        SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
        step sanitize.log 200 "$SAN" --tool memcheck --leak-check no $G/test_gpu_ops
        ;;
    decab)
        # #5 resident decode A/B in one call: as built against .gpu/ft_old (OLD_REV=<commit>
        # tools/gpu_pack.sh), alternated twice on 12 of the 48 layers (qwen3-30b-a3b@12: the same
        # per-layer kernels, a quarter of the generating), then once each on all 48 (the two give
        # the per-layer and the per-token cost). FT_STEP_TIMING=1 prints where each step's wall
        # time went. AB_ENVS adds switches of this build as configurations.
        ab decab.log "12 layers" 2 --synthetic qwen3-30b-a3b@12 -p 0 -n 128 -r 3 --backend cuda
        ab decab.log "48 layers" 1 --synthetic qwen3-30b-a3b -p 512 -n 128 -r 3 --backend cuda
        ;;
    sampab)
        # #5 sampled decode on 12 layers, alternated twice: greedy (ids only); temperature 0.8 and
        # Qwen's defaults (t 0.7, top-k 20, top-p 0.8), each drawn on the device (the default)
        # and by the host sampler from the logits (FT_ENGINE_DRAW=0); then the 48 layers greedy
        # and with Qwen's defaults on the device
        for round in $(seq "${SAMPAB_ROUNDS:-2}"); do
            for cfg in "FT_AB=greedy -" "FT_AB=device --temp 0.8" "FT_ENGINE_DRAW=0 --temp 0.8" \
                       "FT_AB=device --temp 0.7 --top-k 20 --top-p 0.8" \
                       "FT_ENGINE_DRAW=0 --temp 0.7 --top-k 20 --top-p 0.8"; do
                read -r envs args <<<"$cfg"
                [ "$args" = - ] && args=
                echo "### $round $envs $args" >>"$OUT/sampab.log"
                # shellcheck disable=SC2086
                step sampab.log 200 env "$envs" $G/ft bench --synthetic qwen3-30b-a3b@12 -p 0 -n 128 \
                    -r 3 --backend cuda $args
            done
        done
        for args in "" "--temp 0.7 --top-k 20 --top-p 0.8"; do
            [ "${SAMPAB_48:-1}" = 0 ] && break # SAMPAB_48=0: 12 layers only
            echo "### 48 layers $args" >>"$OUT/sampab.log"
            # shellcheck disable=SC2086
            step sampab.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 128 -r 3 --backend cuda $args
        done
        ;;
    hybprof)
        # #8: hybrid decode at 30G with the host side of each layer step (FT_GPU_PROFILE=1)
        FT_GPU_PROFILE=1 step hybprof.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 0 -n 64 -r 1 \
            --backend offload --vram-limit 30G --moe-backend hybrid
        ;;
    hybab)
        # #8 at 30G: as built against .gpu/ft_old (OLD_REV=<commit> tools/gpu_pack.sh),
        # alternated twice, each with the host side of a layer step (FT_STEP_TIMING=1); AB_ENVS
        # adds switches of this build (AB_ENVS=FT_SPAN_GATE=1). About 45 s a run.
        ab hybab.log 30G 2 --synthetic qwen3-30b-a3b -p 64 -n 128 -r 1 --backend offload \
            --vram-limit 30G --moe-backend hybrid
        ;;
    lat)
        step lat.log 120 $G/bench_latency 2000
        ;;
    hybenv)
        # #8 at 30G in one process (one load): the defaults and each of AB_ENVS's settings
        # (e.g. AB_ENVS="FT_SPAN_GATE=1 FT_EXEC_FUSED=0"), alternated AB_CYCLES times (default 3),
        # each with FT_STEP_TIMING=1. Switches read once per process (FT_PDL, FT_GEMV_SPLITK,
        # FT_MOE_TM, FT_THP, FT_POOL_*) need hybab's one process per run instead.
        envs=""
        for e in ${AB_ENVS:-}; do envs="$envs/$e"; done
        FT_STEP_TIMING=1 step hybenv.log 580 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 128 -r 1 \
            --backend offload --vram-limit 30G --moe-backend hybrid --env "${envs#/}/" --cycles "${AB_CYCLES:-3}"
        ;;
    hyb3)
        # #8's last condition: hybrid never more than 5% below the better of cpu and offload, at
        # 12G, 24G and 30G (uniform routing; -p 64: the cpu backend fills its cache in prefill),
        # the nine combinations on one loaded model (ft bench's comma lists); hyb3x: one process each
        step hyb3.log 500 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 1 --backend offload \
            --vram-limit 12G,24G,30G --moe-backend hybrid,cpu,offload
        ;;
    splitab)
        step splitab.log 560 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 1 --backend offload \
            --vram-limit ${SPLIT_VRAM:-24G,30G} --moe-backend hybrid,cpu \
            --env '/FT_SPLIT_RATES=1 FT_SPLIT_COPY_END=0/FT_SPLIT_COPY_END=0/' --cycles "${SPLIT_CYCLES:-2}"
        ;;
    hyb3env)
        envs=""
        for e in ${AB_ENVS:-}; do envs="$envs/$e"; done
        step hyb3env.log 380 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n "${HYB_N:-64}" -r 1 --backend offload \
            --vram-limit 12G,24G,30G --moe-backend hybrid,cpu,offload --env "${envs#/}/" --cycles "${AB_CYCLES:-2}"
        ;;
    keepab)
        FT_STEP_TIMING=1 step keepab.log 400 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 128 -r 1 \
            --backend offload --vram-limit 24G,30G --moe-backend hybrid --env '/FT_KEEPALIVE=1/' --cycles 3
        ;;
    tg128)
        step tg128.log 400 $G/ft bench --synthetic qwen3-30b-a3b --backend offload --vram-limit 30G \
            --moe-backend hybrid,cpu,offload
        ;;
    execpf)
        for f in mxfp4 nvfp4 bf16; do
            echo "### cache $f" >>"$OUT/execpf.log"
            step execpf.log 60 $G/bench_exec --format $f --threads 16 --steps 300 --experts 8
        done
        for round in 1 2; do
            for pf in 4096 16384 65536; do
                echo "### $round FT_X32_PF=$pf mxfp4" >>"$OUT/execpf.log"
                step execpf.log 60 env FT_X32_PF=$pf $G/bench_exec --format mxfp4 --threads 16 --steps 300
            done
        done
        ;;
    pfsweep)
        # #9: the kernels' compute rate (from the cache, --experts k) at 16 threads, twice; then
        # MXFP4 and NVFP4 from DRAM with FT_X32_PF 2048, 4096, 8192, 16384 bytes of prefetch
        # distance, in Qwen3-30B-A3B's shape and (MXFP4) gpt-oss-20b's, three rounds, the order
        # reversed in the middle round (drift within a call is real)
        for round in 1 2; do
            for f in mxfp4 nvfp4 bf16; do
                echo "### cache $round $f" >>"$OUT/pfsweep.log"
                step pfsweep.log 60 $G/bench_exec --format $f --threads 16 --steps 300 --experts 8
            done
        done
        for round in 1 2 3; do
            pfs="2048 4096 8192 16384"
            [ $round = 2 ] && pfs="16384 8192 4096 2048"
            for pf in $pfs; do
                for cfg in "qwen mxfp4" "qwen nvfp4" "gptoss mxfp4"; do
                    read -r shape f <<<"$cfg"
                    sh=()
                    [ $shape = gptoss ] && sh=(--hidden 2880 --expert-width 2880 -k 4)
                    echo "### $round FT_X32_PF=$pf $shape $f" >>"$OUT/pfsweep.log"
                    step pfsweep.log 60 env FT_X32_PF=$pf $G/bench_exec --format $f --threads 16 \
                        --steps 300 "${sh[@]}"
                done
            done
        done
        for pf in 4096 16384 4096 16384; do # fewer cores: each reads faster, so farther ahead?
            for t in 1 4; do
                echo "### threads $t FT_X32_PF=$pf qwen mxfp4" >>"$OUT/pfsweep.log"
                step pfsweep.log 60 env FT_X32_PF=$pf $G/bench_exec --format mxfp4 --threads $t --steps 300
            done
        done
        ;;
    mxgab)
        # #9: one token's MXFP4 / NVFP4 rows by groups of four blocks (the default) against
        # FT_X32_MXG=0 (the 16 x 4 transpose), alternated three times: one thread from L2 (one
        # small expert), from the cache at 16 threads and one, then from DRAM at 16 threads in
        # both shapes; test_ggml_dot first when packed
        [ -x $G/test_ggml_dot ] && step mxgab.log 60 $G/test_ggml_dot
        exec_ab mxgab.log FT_X32_MXG 3 "1 L2 mxfp4" "1 L2 nvfp4" "1 L2 bf16" "16 8 mxfp4" "16 8 nvfp4" \
            "1 8 mxfp4" "1 8 nvfp4" "16 0 mxfp4" "16 0 nvfp4" "16 0 gptoss"
        ;;
    cpu9)
        # #9: whole-model decode on the CPU backend with MXFP4 / NVFP4 experts (16 threads): each
        # token reads every active weight once, so its GB/s against the DRAM read it prints
        for f in gpt-oss-20b qwen3-30b-a3b:mxfp4 qwen3-30b-a3b:nvfp4; do
            step cpu9.log 300 $G/ft bench --synthetic "$f" --backend cpu -t 16 -p 64 -n 64 -r 2
        done
        ;;
    cpuab)
        # #9: whole-model CPU decode as built against .gpu/ft_old (OLD_REV), alternated twice:
        # gpt-oss-20b and Qwen3-30B-A3B MXFP4/NVFP4, 16 threads
        for round in 1 2; do
            for bin in ft ft_old; do
                [ -x $G/$bin ] || continue
                for f in gpt-oss-20b qwen3-30b-a3b:mxfp4 qwen3-30b-a3b:nvfp4; do
                    echo "### $round $bin $f" >>"$OUT/cpuab.log"
                    step cpuab.log 120 $G/$bin bench --synthetic "$f" --backend cpu -t 16 -p 16 -n 64 -r 2
                done
            done
        done
        ;;
    claimab)
        # the pool's claimed tasks (default) against FT_POOL_CLAIM=0 (worker i runs task i): a
        # worker woken late no longer holds the step; bench_exec at 16 threads from DRAM,
        # alternated six times (late workers come in ~1 run of 4 on this host)
        for round in 1 2 3 4 5 6; do
            for c in 1 0; do
                for f in mxfp4 nvfp4; do
                    echo "### $round FT_POOL_CLAIM=$c $f" >>"$OUT/claimab.log"
                    step claimab.log 60 env FT_POOL_CLAIM=$c $G/bench_exec --format $f --threads 16 --steps 300
                done
            done
        done
        ;;
    execenv)
        # #9: bench_exec at 16 threads from DRAM under each EXEC_ENVS setting (';'-separated, each
        # a list of VAR=VALUE, "-" for the defaults), EXEC_ROUNDS rounds (default 3), formats
        # EXEC_FMTS (default: mxfp4 nvfp4 gptoss), alternated in that order
        IFS=';' read -r -a envs <<<"${EXEC_ENVS:--}"
        for round in $(seq "${EXEC_ROUNDS:-3}"); do
            for e in "${envs[@]}"; do
                for f in ${EXEC_FMTS:-mxfp4 nvfp4 gptoss}; do
                    sh=(--format $f)
                    [ $f = gptoss ] && sh=(--format mxfp4 --hidden 2880 --expert-width 2880 -k 4)
                    echo "### $round [$e] $f" >>"$OUT/execenv.log"
                    # shellcheck disable=SC2086
                    step execenv.log 60 env ${e/#-/} $G/bench_exec --threads 16 --steps 300 "${sh[@]}"
                done
            done
        done
        ;;
    exec9)
        # #9's condition as built: the executor at 16 threads from DRAM, MXFP4 and NVFP4 in
        # Qwen3-30B-A3B's shape and MXFP4 in gpt-oss-20b's, five rounds; bf16 once
        for round in 1 2 3 4 5; do
            for f in mxfp4 nvfp4 gptoss; do
                sh=(--format $f)
                [ $f = gptoss ] && sh=(--format mxfp4 --hidden 2880 --expert-width 2880 -k 4)
                echo "### $round $f" >>"$OUT/exec9.log"
                step exec9.log 60 $G/bench_exec --threads 16 --steps 300 "${sh[@]}"
            done
        done
        echo "### bf16" >>"$OUT/exec9.log"
        step exec9.log 60 $G/bench_exec --threads 16 --steps 300 --format bf16
        ;;
    isa)
        # #9: what one core does per second with the x32 kernels' instructions (bench_isa: the
        # clock from dependent multiplies, each zmm instruction's throughput), one thread then 16
        step isa.log 60 $G/bench_isa --threads 1
        step isa.log 60 $G/bench_isa --threads 16
        step isa.log 60 $G/bench_isa --threads 1
        ;;
    pairab)
        # #9: one token's rows of whole chunks by groups two interleaved (default) against one at
        # a time (FT_X32_PAIR_FULL=0): one thread from L2, 16 threads from DRAM, three rounds
        exec_ab pairab.log FT_X32_PAIR_FULL 3 "1 L2 mxfp4" "1 L2 nvfp4" "16 0 mxfp4" "16 0 nvfp4" "16 0 gptoss"
        ;;
    cpuall)
        # #8: --moe-backend cpu with every expert on the CPU (llama.cpp's CPU experts decode
        # 17.6 tok/s on this host): every MoE layer a CPU layer (unpinned, decoded on the CPU);
        # then the fewest cache slots one token needs (8 of 6,144: hits ~0.1%)
        step cpuall.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 2 --backend offload \
            --moe-backend cpu --moe-cpu-layers 48
        step cpuall.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 2 --backend offload \
            --moe-backend cpu --moe-cache-size 8
        ;;
    hyb3x)
        for v in 12G 24G 30G; do
            for mb in hybrid cpu offload; do
                echo "### $v $mb" >>"$OUT/hyb3.log"
                step hyb3.log 150 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 1 \
                    --backend offload --vram-limit $v --moe-backend $mb
            done
        done
        ;;
    bw)
        # #8/#9: ft bench bw per expert format (the CPU executor alone and next to copies)
        for f in bf16 mxfp4 nvfp4 q4_k; do step bw.log 120 $G/ft bench bw --format $f; done
        # the executor sustained (mean over 400 steps, twice: that host's runs vary)
        for f in mxfp4 nvfp4 fp8 q4_k bf16 mxfp4 nvfp4; do
            step bw.log 120 $G/bench_exec --format $f --steps 400
        done
        ;;
    real)
        # #10: the default real model through ft serve on the GPU (tools/gpu_model_chunks.sh put
        # its parts there; openai's wheels travel in .whl)
        step real.log 60 tools/gpu_model_chunks.sh join
        step real.log 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site .whl/*.whl
        M=models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
        PYTHONPATH=/tmp/site step real.log 300 python3 tests/server/test_real_model.py --ft $G/ft \
            --model $M --ref tests/data/real/qwen2.5-coder-0.5b-instruct.json --backend cuda
        step real.log 120 $G/ft bench --model $M -p 512 -n 128 -r 3 --backend cuda
        step real.log 120 $G/ft bench --model $M -p 512 -n 128 -r 3 --backend cpu -t 16
        ;;
    *) echo "gpu_run: unknown part '$part' (tests, bench, oss, real, offload, long, profile, tm64, exec, exec2, ncu, decab, hybprof, sampab, hybab, splitab, hyb3env, keepab, tg128, execpf, pfsweep, mxgab, cpu9, cpuab, claimab, execenv, exec9, isa, pairab, hyb3, hyb3x, cpuall, hybenv, lat, execab, bw)" >&2 ;;
    esac
done
echo "gpu_run: done in $SECONDS s; logs in $OUT" | tee -a "$OUT/done.txt"
