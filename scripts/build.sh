#!/usr/bin/env bash
# Configures and builds libdashattn into ./build (or $DASHATTN_BUILD_DIR). The CUDA backend is compiled when nvcc
# is found (sm_80 + sm_90a; compile-only on machines without a GPU), unless DASHATTN_CUDA=OFF; the Python
# extension when nanobind is importable.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${DASHATTN_BUILD_DIR:-build}
nvcc_path=$(command -v nvcc || true)
[ -z "$nvcc_path" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_path=/usr/local/cuda/bin/nvcc
cuda=${DASHATTN_CUDA:-$([ -n "$nvcc_path" ] && echo ON || echo OFF)}
extra=()
[ "$cuda" = ON ] && extra+=(-DDASHATTN_WITH_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc_path")
# The Python extension is built into the same tree (build/bindings/python) when nanobind is importable.
python3 -m nanobind --cmake_dir >/dev/null 2>&1 && extra+=(-DDASHATTN_BUILD_PYTHON=ON)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
