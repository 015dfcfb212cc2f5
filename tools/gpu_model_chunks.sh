#!/usr/bin/env bash
# gpu_model_chunks.sh — moves the default real model (491 MB) to the GPU machine in 13 parts, which has no
# network and takes at most 64 MiB of carried files per device call. A carried path is gone in
# the next call, but files outside the checkout stay while the machine is warm (about 30 s
# between calls), so each part is stashed in /var/tmp there:
#   here:   tools/gpu_model_chunks.sh split          # .gpu-model/part00 .. part12
#   device: one call per part, back to back:
#           run(command="tools/gpu_model_chunks.sh stash", carry=[".gpu-model/part00"])
#           ... then one call with the binaries and openai's wheels runs the test (gpu_run.sh real):
#           run(command="tools/gpu_run.sh real", carry=[".gpu", ".whl"])
# join reassembles models/qwen2.5-coder-0.5b-instruct/*.gguf there and checks it against the
# sha256 pinned in tools/get_model.sh; a machine that went cold in between fails that check.
set -euo pipefail
cd "$(dirname "$0")/.."
F=models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
D=.gpu-model
STASH=/var/tmp/ft-model-parts
case ${1:-} in
split)
    [ -f "$F" ] || { echo "gpu_model_chunks: $F is missing (tools/get_model.sh fetches it)" >&2; exit 2; }
    grep -qx "/$D/" .git/info/exclude 2>/dev/null || echo "/$D/" >>.git/info/exclude
    rm -rf "$D" && mkdir -p "$D"
    split -b 38M -d "$F" "$D/part" # each call carries at most 64 MiB with the tracked files (~25 MB)
    ls "$D"
    ;;
stash)
    mkdir -p "$STASH" && mv "$D"/part* "$STASH"/ && ls "$STASH"
    ;;
join)
    want=$(sed -n 's/^ *sha=\([0-9a-f]\{64\}\)$/\1/p' tools/get_model.sh | head -1) # Qwen's file
    n=$(ls "$STASH"/part* 2>/dev/null | wc -l)
    mkdir -p "$(dirname "$F")"
    cat "$STASH"/part* >"$F" 2>/dev/null || true
    got=$(sha256sum "$F" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        echo "gpu_model_chunks: $n parts here ($(ls "$STASH" 2>/dev/null | tr '\n' ' ')) do not make" \
             "the model (sha256 $got, want $want): the machine went cold between calls; carry" \
             "every part again" >&2
        exit 1
    fi
    echo "gpu_model_chunks: $F reassembled from $n parts (sha256 verified)"
    ;;
*) echo "usage: tools/gpu_model_chunks.sh split|stash|join" >&2; exit 2 ;;
esac
