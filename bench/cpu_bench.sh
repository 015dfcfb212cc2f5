#!/usr/bin/env bash
# cpu_bench.sh — the CPU decode/prefill benchmarks behind the README's table, in one run:
# machine facts, bench_cpu (DRAM read, bf16 GEMV and GEMM) and `ft bench` on synthetic presets.
# Usage: bench/cpu_bench.sh [BUILD_DIR] [PRESET...]   (default build, qwen3-30b-a3b)
set -u
B=${1:-build}; shift || true
PRESETS=${*:-qwen3-30b-a3b}
echo "## $(date -u +%F) $(uname -r)"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket" || true
free -g | head -2
"$B/bench_cpu" --mib 4096 || echo "bench_cpu failed: $?"
for p in $PRESETS; do
  echo "### ft bench --synthetic $p -p 64 -n 16 -r 3"
  "$B/ft" bench --synthetic "$p" -p 64 -n 16 -r 3 || echo "ft bench failed: $?"
done
