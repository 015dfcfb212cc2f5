#!/usr/bin/env bash
# gpu_run.sh — runs ON the GPU machine (device tool), from the repository root, with .gpu/ carried
# (tools/gpu_pack.sh builds it here): every GPU test, then the benchmarks the open issues ask for,
# each under a time limit, all output under $OUT (default ./gpu-out). A device call runs at most
# 600 s; tests take ~15 s, bench ~4 min (every synthetic model is generated anew), oss ~50 s,
# real ~20 s, bw ~30 s, offload ~7 min (give it its own call):
#   run(command="tools/gpu_run.sh tests", carry=[".gpu"])
# Parts (any order, several at once):
#   tests    test_gpu_ops, test_gpu_model, test_gpu_residency                 -> tests.log
#   bench    resident tg/pp (bf16); the CPU backend on MXFP4/NVFP4/Q4_K; bench_ggml (CPU, then
#            --gpu: the GPU's int8 block GEMVs)                              -> bench.log
#   staged   issue 28: Q8_0 experts at 17G: uncapped, 8 GiB budget, --emulate-pin-cap 16G/8G/1G
#   ggml     issue 32: bench_ggml --gpu; resident Q4_K experts, int8 vs fp32 kernels -> ggml.log
#   fam      issues 26/27: Qwen3.6 at 30G and NVFP4, GLM-4.7-Flash at 24G/12G, MiniMax-M2@16 -> fam.log
#   gdn      issue 26: Qwen3.6 resident tg/pp and FT_PROFILE=2 prefill split  -> gdn.log
#   auto     --backend auto with --vram-limit 30G on the 30B shape: picks offload -> auto.log
#   oss      gpt-oss-20b / 120b (MXFP4) offloaded under a VRAM limit        -> oss.log
#   real     the real model (parts from tools/gpu_model_chunks.sh; carry .gpu and .whl):
#            test_real_model.py --backend cuda, ft bench on it (cuda; cpu 16 threads) -> real.log
#   offload  hybrid/cpu/offload at 30G, hybrid at 12G (uniform routing, tg128);
#            sticky:0.8 routing at 24G                                        -> offload.log
#   long     pp4096 at 30G with 512-, 2048- and 4096-token passes (-b); at 24G, 12G -> long.log
#   profile  FT_PROFILE=2 per-op GPU time of resident pp512 and offloaded pp4096 at 30G; hybrid
#            decode at 30G with FT_PROFILE=1 (the layer step's host side)  -> profile.log
#   tg128    the three backends at 30G, tg128 and pp512, 3 repetitions      -> tg128.log
#   hyb3     hybrid / cpu / offload at 12G, 24G, 30G (tg64), one process    -> hyb3.log
#   hybab    hybrid at 30G: as built vs .gpu/ft_old (OLD_REV), alternated   -> hybab.log
#   decab    resident decode: as built vs .gpu/ft_old, alternated, 12 then 48 layers -> decab.log
#   cpuab    whole-model CPU decode, as built vs .gpu/ft_old, twice          -> cpuab.log
#   cpu9     whole-model CPU decode, gpt-oss-20b and Qwen3-30B-A3B MXFP4/NVFP4 -> cpu9.log
#   cpuall   --moe-backend cpu with every expert on the CPU                 -> cpuall.log
#   exec     bench_exec mxfp4 at 1, 8, 16 threads, nvfp4 and bf16 at 16; q8_0, q4_0, q4_k,
#            q5_k, q6_k at 16 and q8_0 at 1 (issue 32)                       -> exec.log
#   exec9    MXFP4/NVFP4 (both shapes) from DRAM at 16 threads, five rounds -> exec9.log
#   isa      bench_isa: the clock and zmm instruction throughput, 1 and 16 threads -> isa.log
#   lat      bench_latency: host<->GPU wake-up idle, beside DRAM streams and copies -> lat.log
#   ncu      Nsight Compute per-kernel time + DRAM bytes of resident decode; memcheck of the
#            op tests (Firecracker kinds only: kind nvidia-h200-x2)          -> ncu.log, sanitize.log
#   prec     issue 25 part 6: the n08 and plain fixtures through cuda and offload, per position
#            with the router gaps (tools/check_fixtures.py), and the CPU fast path beside -> prec.log
#   bw       ft bench bw for bf16, mxfp4, nvfp4, q4_k experts; bench_exec sustained -> bw.log
#   hybrid   issues 26/27: Qwen3.6-35B-A3B and GLM-4.7-Flash at 4k context against the 30B
#            full-attention shape (tg64 after a 4096-token prompt), and FT_PROFILE=2 per-op
#            time of the hybrid's pp512 (where its prefill goes)         -> hybrid.log
#   policy   issue 33: the 12-layer 30B shape offloaded at 4G under zipf:0.8, zipf:1.2 and
#            sticky:0.8, each policy's tg128 in the engine and the traces (--record-routing:
#            LRU / LFRU / SLRU / Belady replayed on them) -> policy.log, *.trace
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

ab() { # ab LOG LABEL ROUNDS BENCH-ARGS...: ft bench as built and as .gpu/ft_old (when packed:
    # OLD_REV=<commit> tools/gpu_pack.sh), alternated ROUNDS times, each with FT_PROFILE=1
    local log=$1 label=$2 rounds=$3 round bin
    shift 3
    for round in $(seq "$rounds"); do
        for bin in ft ft_old; do
            [ -x "$G/$bin" ] || continue
            echo "### $label $round $bin" >>"$OUT/$log"
            FT_PROFILE=1 step "$log" 200 "$G/$bin" bench "$@"
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
        step bench.log 200 $G/bench_ggml --gpu # issue 32: the int8 GEMVs' GB/s beside the HBM ceiling
        ;;
    prec)
        # a position off by > 0.1 without a router near-tie, or "first8" (the fp32 decode path)
        # above 1e-3, is a bug; near-ties flipping under bf16 rounding are not
        F="--only mixtral_n08 qwen3_moe_n08 mixtral qwen3_moe"
        for b in cuda offload; do
            echo "== $b" >>"$OUT/prec.log"
            step prec.log 200 python3 tools/check_fixtures.py --ft $G/ft --backend $b --positions $F
        done
        echo "== cpu fast" >>"$OUT/prec.log"
        step prec.log 200 python3 tools/check_fixtures.py --ft $G/ft --backend cpu --cpu-act fast --positions $F
        ;;
    staged)
        # issue 28: a pin budget of 8 GiB under 17G of VRAM (the issue's case, Q8_0 experts):
        # uncapped, capped (unpinned layers staged through the pinned ring), capped as before
        # (.gpu/ft_old: those layers' misses all on the CPU)
        Q="--synthetic qwen3-30b-a3b:q8_0 -p 512 -n 128 -r 1 --backend offload --vram-limit 17G"
        Q="$Q --synthetic-routing zipf:1.2" # hot experts: where losing the slots of a layer shows
        step staged.log 200 $G/ft bench $Q
        FREETOKEN_PIN_BUDGET_GB=8 step staged.log 200 $G/ft bench $Q
        # the emulated WSL2 wall (--emulate-pin-cap): probed, 80% kept, the rest staged
        for c in 16G 8G 1G; do
            step staged.log 200 $G/ft bench $Q --emulate-pin-cap $c
        done
        ;;
    fam)
        # issues 26/27: the new families offloaded and in their published formats
        step fam.log 200 $G/ft bench --synthetic qwen3.6-35b-a3b -p 512 -n 128 -r 1 --backend offload \
            --vram-limit 30G
        step fam.log 200 $G/ft bench --synthetic qwen3.6-35b-a3b:nvfp4 -p 512 -n 128 -r 2 --backend cuda
        for v in 24G 12G; do
            step fam.log 200 $G/ft bench --synthetic glm-4.7-flash -p 512 -n 64 -r 1 --backend offload \
                --vram-limit $v
        done
        step fam.log 200 $G/ft bench --synthetic minimax-m2@16 -p 256 -n 64 -r 1 --backend offload \
            --vram-limit 24G
        ;;
    ggml)
        # issue 32: the int8 block GEMVs' GB/s beside HBM, then resident Q4_K experts with them
        # (--cpu-act fast, the default) and with the fp32 kernels (f32), alternated
        step ggml.log 200 $G/bench_ggml --gpu
        for a in fast f32 fast f32; do
            step ggml.log 150 $G/ft bench --synthetic qwen3-30b-a3b:q4_k@12 -p 512 -n 128 -r 2 \
                --backend cuda --cpu-act $a
        done
        ;;
    gdn)
        # issue 26: the hybrid's prefill with the chunked DeltaNet kernels, its per-op split, and
        # decode beside it
        step gdn.log 200 $G/ft bench --synthetic qwen3.6-35b-a3b -p 512 -n 128 -r 2 --backend cuda
        FT_PROFILE=2 step gdn.log 200 $G/ft bench --synthetic qwen3.6-35b-a3b -p 512 -n 0 -r 1 \
            --backend cuda
        ;;
    auto)
        # --backend auto (the default) over the VRAM limit: the offload backend, said in one line
        step auto.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 32 -r 1 --vram-limit 30G
        grep -n "backend auto" "$OUT/auto.log" >>"$OUT/auto.log"
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
        FT_PROFILE=2 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 512 -n 32 -r 1 \
            --backend cuda
        FT_PROFILE=2 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 4096 -n 8 -r 1 \
            -b 4096 --backend offload --vram-limit 30G
        # hybrid decode at 30G, with the host side of each layer step (graphs on)
        FT_PROFILE=1 step profile.log 300 $G/ft bench --synthetic qwen3-30b-a3b -p 0 -n 64 -r 1 \
            --backend offload --vram-limit 30G --moe-backend hybrid
        ;;
    exec)
        for t in 1 8 16; do step exec.log 120 $G/bench_exec --format mxfp4 --threads $t --steps 300; done
        for f in nvfp4 bf16; do step exec.log 120 $G/bench_exec --format $f --threads 16 --steps 300; done
        # issue 32: the GGUF block formats (int8 activations) against bf16 and Q4_K's share
        for f in q8_0 q4_0 q4_k q5_k q6_k; do
            step exec.log 120 $G/bench_exec --format $f --threads 16 --steps 300
        done
        step exec.log 120 $G/bench_exec --format q8_0 --threads 1 --steps 300
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
        # the per-layer and the per-token cost). FT_PROFILE=1 prints where each step's wall
        # time went.
        ab decab.log "12 layers" 2 --synthetic qwen3-30b-a3b@12 -p 0 -n 128 -r 3 --backend cuda
        ab decab.log "48 layers" 1 --synthetic qwen3-30b-a3b -p 512 -n 128 -r 3 --backend cuda
        ;;
    hybab)
        # #8 at 30G: as built against .gpu/ft_old (OLD_REV=<commit> tools/gpu_pack.sh),
        # alternated twice, each with the host side of a layer step (FT_PROFILE=1). About 45 s a run.
        ab hybab.log 30G 2 --synthetic qwen3-30b-a3b -p 64 -n 128 -r 1 --backend offload \
            --vram-limit 30G --moe-backend hybrid
        ;;
    lat)
        step lat.log 120 $G/bench_latency 2000
        ;;
    hyb3)
        # #8's last condition: hybrid never more than 5% below the better of cpu and offload, at
        # 12G, 24G and 30G (uniform routing; -p 64: the cpu backend fills its cache in prefill),
        # the nine combinations on one loaded model (ft bench's comma lists); hyb3x: one process each
        step hyb3.log 500 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 1 --backend offload \
            --vram-limit 12G,24G,30G --moe-backend hybrid,cpu,offload
        ;;
    tg128)
        step tg128.log 400 $G/ft bench --synthetic qwen3-30b-a3b --backend offload --vram-limit 30G \
            --moe-backend hybrid,cpu,offload
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
    cpuall)
        # #8: --moe-backend cpu with every expert on the CPU (llama.cpp's CPU experts decode
        # 17.6 tok/s on this host): every MoE layer a CPU layer (unpinned, decoded on the CPU);
        # then the fewest cache slots one token needs (8 of 6,144: hits ~0.1%)
        step cpuall.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 2 --backend offload \
            --moe-backend cpu --moe-cpu-layers 48
        step cpuall.log 200 $G/ft bench --synthetic qwen3-30b-a3b -p 64 -n 64 -r 2 --backend offload \
            --moe-backend cpu --moe-cache-size 8
        ;;
    hybrid)
        for p in qwen3-30b-a3b qwen3.6-35b-a3b glm-4.7-flash; do
            step hybrid.log 240 $G/ft bench --synthetic $p -p 4096 -n 64 -r 1 --backend cuda
        done
        FT_PROFILE=2 step hybrid.log 240 $G/ft bench --synthetic qwen3.6-35b-a3b -p 512 -n 0 -r 1 \
            --backend cuda
        ;;
    policy)
        for r in zipf:0.8 zipf:1.2 sticky:0.8; do
            for pol in lru lfru slru; do
                rec=""
                [ $pol = lru ] && rec="--record-routing $OUT/${r/:/_}.trace"
                step policy.log 150 $G/ft bench --synthetic qwen3-30b-a3b@12 --synthetic-routing $r \
                    -p 64 -n 128 -r 1 --backend offload --vram-limit 4G --moe-cache-policy $pol $rec
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
    *) echo "gpu_run: unknown part '$part' (tests, bench, auto, prec, oss, real, offload, long, profile, tg128, hyb3, hybab, decab, cpuab, cpu9, cpuall, exec, exec9, isa, lat, ncu, bw)" >&2 ;;
    esac
done
echo "gpu_run: done in $SECONDS s; logs in $OUT" | tee -a "$OUT/done.txt"
