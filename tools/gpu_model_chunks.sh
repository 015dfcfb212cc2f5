#!/usr/bin/env bash
# gpu_model_chunks.sh — moves the default real model (491 MB) to the GPU machine, which has no
# network and takes at most 64 MiB of carried files per device call. Ignored files written there
# stay while the machine is warm (about 30 s between calls), so the model goes over in pieces:
#   here:   tools/gpu_model_chunks.sh split          # .gpu-model/part00 .. part07
#   device: one call per part, back to back:  run(command="true", carry=[".gpu-model/part00"])
#           ... (the last one may carry .gpu too and go on to the test:)
#           run(command="tools/gpu_model_chunks.sh join && <test>", carry=[".gpu-model/part07", ".gpu"])
# join reassembles models/qwen2.5-coder-0.5b-instruct/*.gguf there and checks it against the
# sha256 pinned in tools/get_model.sh; a machine that went cold in between fails that check.
set -euo pipefail
cd "$(dirname "$0")/.."
F=models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
D=.gpu-model
case ${1:-} in
split)
    [ -f "$F" ] || { echo "gpu_model_chunks: $F is missing (tools/get_model.sh fetches it)" >&2; exit 2; }
    grep -qx "/$D/" .git/info/exclude 2>/dev/null || echo "/$D/" >>.git/info/exclude
    rm -rf "$D" && mkdir -p "$D"
    split -b 60M -d "$F" "$D/part"
    ls "$D"
    ;;
join)
    want=$(sed -n 's/^ *sha=\([0-9a-f]\{64\}\)$/\1/p' tools/get_model.sh | head -1) # Qwen's file
    n=$(ls "$D"/part* 2>/dev/null | wc -l)
    mkdir -p "$(dirname "$F")"
    cat "$D"/part* >"$F" 2>/dev/null || true
    got=$(sha256sum "$F" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        echo "gpu_model_chunks: $n parts here ($(ls "$D" 2>/dev/null | tr '\n' ' ')) do not make" \
             "the model (sha256 $got, want $want): the machine went cold between calls; carry" \
             "every part again" >&2
        exit 1
    fi
    echo "gpu_model_chunks: $F reassembled from $n parts (sha256 verified)"
    ;;
*) echo "usage: tools/gpu_model_chunks.sh split|join" >&2; exit 2 ;;
esac
