#!/usr/bin/env bash
# Build llama.cpp's llama-server once per machine and print the binary's path (later runs reuse it).
# Source: the llama.cpp tree vendored in the llama-cpp-python sdist (needs only the package index;
# only that package comes as source: its build tools come as wheels, so the download takes seconds).
# Takes 6-9 minutes on 2 cores. Output: $cache/llama-server-<version>-noamx/llama-server; the build
# log is $cache/llama-server-<version>-noamx.log (the remote-engine tests print its tail when the
# build failed).
# Usage: scripts/build_llama_server.sh   (env: LLAMA_CPP_PYTHON_VERSION, PLAYGROUND_CACHE_DIR, PYTHON)
set -euo pipefail
cd "$(dirname "$0")/.."
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${PLAYGROUND_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-playground}"
# "-noamx": built without Intel AMX (ggml's AMX matmul crashed llama-server at its first decode, SIGSEGV
# in ggml_backend_amx_mul_mat, on a CPU with AMX tiles); the name keeps an older AMX build from reuse.
build="$version-noamx"
dest="$cache/llama-server-$build"
log="$cache/llama-server-$build.log"
python="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
mkdir -p "$cache"

usable() { [ -x "$dest/llama-server" ] && "$dest/llama-server" --version >/dev/null 2>&1; }
usable && { echo "$dest/llama-server"; exit 0; }

# One build at a time per machine: a second caller waits for the first, then reuses its binary.
exec 9>"$cache/llama-server-$build.lock"
flock 9
usable && { echo "$dest/llama-server"; exit 0; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "Building llama-server from llama-cpp-python==$version (a few minutes; log: $log) ..." >&2
{
  "$python" -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
  tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
  if ! command -v cmake >/dev/null; then  # cmake and ninja come as wheels from the package index
    "$python" -m pip install --quiet --target "$work/tools" cmake ninja
    export PATH="$work/tools/bin:$PATH" PYTHONPATH="$work/tools${PYTHONPATH:+:$PYTHONPATH}"
  fi
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # explicit -mno-* win over -march=native
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx"
  cmake --build "$work/build" --target llama-server -j "$(nproc)"
  mkdir -p "$dest.tmp"
  cp "$work/build/bin/llama-server" "$dest.tmp/"
  "$dest.tmp/llama-server" --version
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
} >"$log" 2>&1 || { echo "llama-server build failed; see $log" >&2; tail -n 20 "$log" >&2; exit 1; }
echo "$dest/llama-server"
