#!/usr/bin/env bash
# gpu_pack.sh — packs what the GPU machine needs into .gpu/ (git-ignored via .git/info/exclude):
# the CUDA build of ft, the GPU tests and bench_cpu (built here for sm_90), and the shared
# libraries its image lacks (jansson, pcre2, utf8proc, microhttpd and its TLS stack). The GPU
# image has gcc, cmake and nvcc but none of those -dev packages and no network, so building
# here and carrying the binaries is the reliable route.
# OLD_REV=<commit> also builds that commit's ft as .gpu/ft_old, for A/B runs in one call.
# Then, on the device tool (carry [".gpu"]):
#   mkdir -p /work; [ -e /work/main ] || ln -s $PWD /work/main   # tests read tests/data by absolute path
#   export LD_LIBRARY_PATH=$PWD/.gpu:/usr/local/cuda/lib64
#   .gpu/test_gpu_ops; .gpu/test_gpu_model; .gpu/test_gpu_residency
#   .gpu/ft bench --synthetic qwen3-30b-a3b -p 512 -n 128 -r 3 --backend cuda
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
[ "$(pwd)" = /work/main ] || echo "gpu_pack: note: tests look for tests/data under $(pwd); link that path on the GPU machine" >&2
cmake -S . -B "$B" -DFT_CUDA=ON -DFT_CUDA_ARCH=90 >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
X="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.gpu/' "$X" 2>/dev/null || echo '/.gpu/' >> "$X"
rm -rf .gpu && mkdir -p .gpu
cp "$B"/ft "$B"/bench_cpu "$B"/bench_ggml "$B"/bench_exec "$B"/bench_isa "$B"/bench_latency "$B"/test_gpu_* .gpu/
if [ -n "${OLD_REV:-}" ]; then # OLD_REV=<commit>: that commit's ft as .gpu/ft_old (gpu_run.sh decab)
  W=/tmp/ft-old-$(git rev-parse --short "$OLD_REV")
  [ -d "$W" ] || git worktree add -q --detach "$W" "$OLD_REV"
  cmake -S "$W" -B "$W/build" -DFT_CUDA=ON -DFT_CUDA_ARCH=90 >/dev/null
  cmake --build "$W/build" -j"$(nproc)" --target ft >/dev/null
  cp "$W/build/ft" .gpu/ft_old
fi
strip -g .gpu/* # debug info is most of each binary; the device tool carries 64 MiB in all
for lib in libjansson.so.4 libpcre2-8.so.0 libutf8proc.so.2 libmicrohttpd.so.12 libgnutls.so.30 \
           libp11-kit.so.0 libidn2.so.0 libunistring.so.2 libtasn1.so.6 libnettle.so.8 \
           libhogweed.so.6 libgmp.so.10 libffi.so.8; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" .gpu/
done
du -sh .gpu
