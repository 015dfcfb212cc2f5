#!/usr/bin/env bash
# run_fuzz.sh BUILD_DIR [SECONDS] — runs every fuzz_* libFuzzer binary in BUILD_DIR for SECONDS
# (default 30) each, starting from a temporary copy of fuzz/corpus/<binary>/ (the checked-in
# seeds are never modified) and fuzz/<binary>.dict when present. Crash/leak/timeout inputs are
# kept in BUILD_DIR/fuzz-artifacts/. Exits non-zero if any target fails or none are found.
# Called by `make fuzz`.
set -u
build=${1:?usage: tools/run_fuzz.sh BUILD_DIR [SECONDS]}
secs=${2:-30}
[ -n "$secs" ] || secs=30
root=$(cd "$(dirname "$0")/.." && pwd)
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/ft-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

n=0
failed=()
for bin in "$build"/fuzz_*; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    name=$(basename "$bin")
    n=$((n + 1))
    corpus="$work/$name"
    mkdir -p "$corpus"
    if [ -d "$root/fuzz/corpus/$name" ]; then
        cp -r "$root/fuzz/corpus/$name/." "$corpus/"
    else
        echo "run_fuzz: warning: no seed corpus fuzz/corpus/$name/" >&2
    fi
    args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="$artifacts/$name-")
    [ -f "$root/fuzz/$name.dict" ] && args+=(-dict="$root/fuzz/$name.dict")
    echo "run_fuzz: $name for ${secs}s (seeds: $(ls "$corpus" | wc -l))"
    if "$bin" "${args[@]}" "$corpus" >"$work/$name.log" 2>&1; then
        grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$work/$name.log" | tail -2
        echo "run_fuzz: $name: ok ($(ls "$corpus" | wc -l) corpus entries)"
    else
        tail -40 "$work/$name.log"
        echo "run_fuzz: $name: FAILED (inputs in $artifacts/)" >&2
        failed+=("$name")
    fi
done

if [ "$n" -eq 0 ]; then
    echo "run_fuzz: no fuzz_* binaries in $build (configure with CC=clang -DFT_FUZZ=ON)" >&2
    exit 1
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "run_fuzz: ${#failed[@]} of $n targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "run_fuzz: all $n targets ok"
