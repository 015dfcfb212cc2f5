#!/usr/bin/env bash
# gpu_run.sh — runs ON the GPU machine (device tool), from the repository root, with .gpu/ carried
# (tools/gpu_pack.sh builds it here): every GPU test, then the benchmarks the open issues ask for,
# each under a time limit, all output under $OUT (default ./gpu-out). A device call runs at most
# 600 s, so give each part its own call (tests ~5 min; bench ~8 min: every synthetic model is
# generated anew; offload: 7 runs of ~1.5 min, which may pass 600 s: the last ones get cut):
#   run(command="tools/gpu_run.sh tests", carry=[".gpu"])
# Parts (any order, several at once):
#   tests    test_gpu_ops, test_gpu_model (FREETOKEN_GPU_EXPERIMENTAL kernels included),
#            test_gpu_residency                                                   -> tests.log
#   bench    #5 resident tg/pp; #9 the CPU executor on the host's 16 cores for MXFP4/NVFP4/Q4_K;
#            bench_ggml; ft bench bw for bf16 and q4_k                            -> bench.log
#   offload  #8 offload/cpu/hybrid at 24G and 12G (uniform routing), #7 sticky:0.8 -> offload.log
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
        step bench.log 120 $G/ft bench bw
        step bench.log 120 $G/ft bench bw --format q4_k
        ;;
    offload)
        # #7's skewed, temporally correlated run first (zipf/sticky kernels: written blind)
        step offload.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 64 -r 1 \
            --backend offload --vram-limit 24G --synthetic-routing sticky:0.8
        for v in 24G 12G; do
            for mode in hybrid cpu offload; do
                step offload.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 64 -r 1 \
                    --backend offload --vram-limit "$v" --moe-backend "$mode"
            done
        done
        ;;
    *) echo "gpu_run: unknown part '$part' (tests, bench, offload)" >&2 ;;
    esac
done
echo "gpu_run: done in $SECONDS s; logs in $OUT" | tee -a "$OUT/done.txt"
