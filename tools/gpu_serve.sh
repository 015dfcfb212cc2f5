#!/usr/bin/env bash
# gpu_serve.sh — issue 30's serving benchmark: ft serve against llama-server on the same GGUF and
# the same token-id trace (bench/serve_bench.py), resident and offloaded. Runs ON the GPU machine
# from the repository root, with .gpu/ (tools/gpu_pack.sh) and .peers/ (a copy of the shared
# peers folder) carried; everything goes under $OUT/serve/ (default ./gpu-out/serve).
#
#   tools/gpu_serve.sh prep   # .peers/llama_vs_ft.sh build, then gguf q8_0 (~5 + ~2 min), if missing
#   tools/gpu_serve.sh        # the benchmark itself, ~6-8 min; needs what prep makes:
#       llama-server at /root/peers/llama.cpp/build/bin/llama-server (LLAMA_SERVER=...)
#       /dev/shm/q3moe-q8_0.gguf, 30 GiB, Qwen3-30B-A3B shape, random weights (GGUF=...)
#       .gpu/ft, the CUDA build (FT=...)
#
# Sections, in this order, each one server started, benchmarked and stopped:
#   ft-resident     ft serve --backend cuda
#   llama-resident  llama-server -ngl 99
#   ft-offload      ft serve --backend offload --moe-cache-size 3072 (hybrid)
#   llama-offload   llama-server -ngl 99 --n-cpu-moe 24 -lm none (CPU experts in pinned memory)
# Offloaded means: half the experts on the GPU. llama.cpp's --n-cpu-moe 24 keeps the experts of
# layers 24-47 on the GPU, 24 x 128 = 3072 experts; ft gets exactly that many GPU expert slots
# (--moe-cache-size 3072, one pool for all layers, filled by use) and --vram-limit 40G, which
# only has to hold them beside the rest. A --vram-limit alone would not match: ft's KV cache is
# fp32 (12 GiB for the 64k-token pool here, llama.cpp's f16 6 GiB) and comes out of the same
# limit, so 17G would leave ft ~2.5 GiB of experts. Both engines keep their KV on the GPU.
# Both servers: 64 slots decoded together, a KV pool of 65,536 tokens shared by all of them,
# 20,480 positions at most per request (for the 16k prompts), temperature 0, ignore_eos. The
# GGUF says context_length 4096 and llama-server caps a slot there, so it is started with
# --override-kv qwen3moe.context_length=int:32768 (ft takes -c beyond the model's length).
# Per section serve_bench.py runs: the 16k-token prompt cold / repeated / different
# (--prefix-ttft 16384); 1, 4, 16, 64 concurrent streams of 512-token prompts and 128 tokens;
# the agent trace (4 conversations x 6 turns, 2,048-token shared prefix, 256 new tokens and
# 64-token answers per turn). Results: $OUT/serve/<section>.md (tables), .json (raw), .log
# (the server's log), summary.md (all tables and one comparison row per section).
#
# SERVE_DRY=1 swaps in local CPU stand-ins with small sizes (to check the script without a GPU):
#   SERVE_DRY=1 DRY_GGUF=small.gguf FT=build/ft [LLAMA_SERVER=cpu-build/llama-server] tools/gpu_serve.sh
# (small.gguf: make_qwen3moe_gguf.py small.gguf --layers 2 --experts 8). Without LLAMA_SERVER
# the llama sections are skipped. SERVE_BUDGET=S changes the total time budget (default 530 s).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
S=$OUT/serve
mkdir -p "$S"
export LD_LIBRARY_PATH=$PWD/.gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FREETOKEN_CACHE=$S/cache
DRY=${SERVE_DRY:-0}
if [ "${1:-run}" = prep ]; then # both parts fit one 600 s call; each is skipped when done
  [ -x .peers/llama_vs_ft.sh ] || { echo "gpu_serve: no .peers/llama_vs_ft.sh (carry a copy of the peers folder as .peers)"; exit 1; }
  t=$SECONDS
  [ -x /root/peers/llama.cpp/build/bin/llama-server ] || timeout 400 .peers/llama_vs_ft.sh build 2>&1 | tail -4
  echo "gpu_serve prep: build $((SECONDS - t)) s"; t=$SECONDS
  if [ ! -s /dev/shm/q3moe-q8_0.gguf ]; then
    timeout 170 .peers/llama_vs_ft.sh gguf q8_0 2>&1 | tail -3
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "gpu_serve prep: gguf cut short: removing the partial file"; rm -f /dev/shm/q3moe-q8_0.gguf; }
  fi
  echo "gpu_serve prep: gguf $((SECONDS - t)) s"
  ls -la /root/peers/llama.cpp/build/bin/llama-server /dev/shm/q3moe-q8_0.gguf
  exit 0
fi

T_START=$SECONDS
BUDGET=${SERVE_BUDGET:-530}
NT=$(nproc)
NP=64 KV=65536 CTX=20480
if [ "$DRY" = 1 ]; then
  GGUF=${DRY_GGUF:?SERVE_DRY=1 needs DRY_GGUF=a small GGUF}
  FT=${FT:-build/ft}
  LLAMA_SERVER=${LLAMA_SERVER:-}
  FT_RES="--backend cpu" FT_OFF="--backend cpu"
  LL_RES="" LL_OFF="--n-cpu-moe 1"
  B_COMMON="--concurrency 1,4 --prompt-tokens 32 --max-tokens 8 --trace agent --agent-convs 2
            --agent-turns 3 --agent-prefix 64 --agent-new 16 --agent-answer 8 --prefix-ttft 256"
  B_RES="--min-requests 2" B_OFF="--min-requests 1"
  NP=8 KV=8192 CTX=4096
  EST=(60 60 60 60) LOAD_MAX=60
else
  GGUF=${GGUF:-/dev/shm/q3moe-q8_0.gguf}
  FT=${FT:-.gpu/ft}
  LLAMA_SERVER=${LLAMA_SERVER:-/root/peers/llama.cpp/build/bin/llama-server}
  FT_RES="--backend cuda" FT_OFF="--backend offload --moe-cache-size 3072 --vram-limit 40G --no-hot-set"
  LL_RES="-ngl 99" LL_OFF="-ngl 99 --n-cpu-moe 24 -lm none"
  B_COMMON="--concurrency 1,4,16,64 --prompt-tokens 512 --max-tokens 128 --trace agent
            --agent-convs 4 --agent-turns 6 --agent-prefix 2048 --agent-new 256 --agent-answer 64
            --prefix-ttft 16384"
  B_RES="--min-requests 32 --max-rounds 8" B_OFF="--min-requests 16 --max-rounds 2"
  # estimated seconds per section (load + benchmark), from pp/tg measured on this machine
  EST=(75 60 115 140) LOAD_MAX=200
fi
NAMES=(ft-resident llama-resident ft-offload llama-offload)
PORT=18480

log() { echo "[gpu_serve $(date +%T) +$((SECONDS - T_START))s] $*" | tee -a "$S/run.log"; }
left() { echo $((BUDGET - (SECONDS - T_START))); }
healthy() { python3 -c 'import sys, urllib.request; urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=3)' "$1" 2>/dev/null; }
gpu_mem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null | head -1; }

SPID=""
stop_server() { # SIGTERM, 20 s, then SIGKILL
  [ -n "$SPID" ] || return 0
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 40); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$SPID" 2>/dev/null && { log "server $SPID did not stop in 20 s: SIGKILL"; kill -KILL "$SPID" 2>/dev/null; }
  wait "$SPID" 2>/dev/null
  SPID=""
}
trap 'stop_server' EXIT

# start_server LOG BOUND CMD...: starts CMD in the background, waits for /health (at most BOUND s)
start_server() {
  local slog=$1 bound=$2 t0=$SECONDS
  shift 2
  echo "$*" >"$slog"
  "$@" >>"$slog" 2>&1 &
  SPID=$!
  while ! healthy $PORT; do
    if ! kill -0 "$SPID" 2>/dev/null; then
      wait "$SPID"; log "server exited ($?) while loading; last lines of $slog:"; tail -8 "$slog" | tee -a "$S/run.log"
      SPID=""; return 1
    fi
    if [ $((SECONDS - t0)) -ge "$bound" ]; then
      log "server not healthy within $bound s; last lines of $slog:"; tail -8 "$slog" | tee -a "$S/run.log"
      stop_server; return 1
    fi
    sleep 1
  done
  log "ready after $((SECONDS - t0)) s (GPU memory used: $(gpu_mem))"
}

log "GGUF $GGUF; ft $FT; llama-server $LLAMA_SERVER; budget $BUDGET s; sections: ${NAMES[*]}"
log "estimated: ${EST[0]} + ${EST[1]} + ${EST[2]} + ${EST[3]} s = $((EST[0] + EST[1] + EST[2] + EST[3])) s"
[ -s "$GGUF" ] || { log "no $GGUF: run tools/gpu_serve.sh prep first"; exit 1; }
[ -x "$FT" ] || log "no $FT: the ft sections are skipped"
{ [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; } || log "no llama-server ($LLAMA_SERVER): the llama sections are skipped"
nvidia-smi >"$S/nvidia-smi.txt" 2>&1
{ ls -la "$FT" "$LLAMA_SERVER" "$GGUF"; git log -1 --format='%H %s'; } >"$S/versions.txt" 2>&1

for i in 0 1 2 3; do
  name=${NAMES[$i]}
  case $name in
    ft-*) [ -x "$FT" ] || continue ;;
    llama-*) { [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; } || continue ;;
  esac
  # this section's share: its estimate x 1.6, but leave each later section 60% of its estimate
  reserve=0
  for j in $(seq $((i + 1)) 3); do reserve=$((reserve + EST[j] * 6 / 10)); done
  cap=$((EST[i] * 16 / 10)); avail=$(($(left) - reserve))
  [ "$avail" -lt "$cap" ] && cap=$avail
  if [ "$cap" -lt 40 ]; then log "$name: skipped, $(left) s left"; continue; fi
  log "== $name: estimated ${EST[i]} s, at most $cap s ($(left) s left in the budget)"
  t0=$SECONDS
  case $name in
    ft-resident) be=$FT_RES b_place=$B_RES ;;
    ft-offload) be=$FT_OFF b_place=$B_OFF ;;
    llama-resident) be=$LL_RES b_place=$B_RES ;;
    llama-offload) be=$LL_OFF b_place=$B_OFF ;;
  esac
  bound=$((cap - 30 < LOAD_MAX ? cap - 30 : LOAD_MAX))
  if [ "${name%%-*}" = ft ]; then
    # shellcheck disable=SC2086
    start_server "$S/$name.log" $bound \
      "$FT" serve --model "$GGUF" --chat-template chatml --served-model-name q3moe \
      --host 127.0.0.1 --port $PORT $be --max-running-requests $NP -c $CTX --kv-tokens $KV \
      --queue-size 256 -t "$NT" || continue
  else
    # shellcheck disable=SC2086
    start_server "$S/$name.log" $bound \
      "$LLAMA_SERVER" -m "$GGUF" -a q3moe --host 127.0.0.1 --port $PORT $be -np $NP -c $KV \
      --kv-unified --kv-unified-per-slot $CTX --cont-batching -fa on -t "$NT" --fit off \
      --override-kv qwen3moe.context_length=int:32768 || continue
  fi
  run_s=$((cap - (SECONDS - t0) - 8))
  if [ "$run_s" -lt 20 ]; then log "$name: loading used the section's time"; stop_server; continue; fi
  log "$name: serve_bench.py for at most $run_s s"
  # shellcheck disable=SC2086
  timeout -k 5 $run_s python3 bench/serve_bench.py --base-url http://127.0.0.1:$PORT \
    --name "$name" --ids 300:150000 --order prefix,sweep,agent $B_COMMON $b_place \
    --request-timeout 150 --wait 10 --deadline $((run_s - 12)) --json "$S/$name.json" \
    >"$S/$name.md" 2>&1
  rc=$?
  log "$name: serve_bench.py exit $rc after $((SECONDS - t0)) s in the section; $(tail -1 "$S/$name.md")"
  python3 -c 'import json, sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5).read().decode())' \
    $PORT "$([ "${name%%-*}" = ft ] && echo /v1/stats || echo /slots)" >"$S/$name.stats.json" 2>/dev/null
  stop_server
done

{
  echo "# Serving benchmark, $(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "GGUF $GGUF; $NP slots, KV pool $KV tokens, at most $CTX per request"
  echo
  J=()
  for n in "${NAMES[@]}"; do [ -s "$S/$n.json" ] && J+=("$S/$n.json"); done
  [ ${#J[@]} -gt 0 ] && python3 bench/serve_bench.py --compare "${J[@]}"
  for n in "${NAMES[@]}"; do [ -s "$S/$n.md" ] && { echo; cat "$S/$n.md"; }; done
} >"$S/summary.md" 2>&1
log "done in $((SECONDS - T_START)) s; $S/summary.md"
head -12 "$S/summary.md"
