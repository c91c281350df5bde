#!/usr/bin/env bash
# Builds the Stage-2 kernels and their checks with nvcc alone and runs them: conformance against the float64
# reference, then (with --bench) the timing table. Usage: tests/cuda_attend/run_device.sh [--bench] [-v]
# ARCH (default 90a) selects the target; BUILD (default build-attend-device) the output folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${ARCH:-90a}
build=${BUILD:-$root/build-attend-device}
mkdir -p "$build/gen"
{
  echo '#pragma once'
  echo '#define DASHATTN_CUDA_INSTANCES(X) X(64, __nv_bfloat16) X(64, __half) X(128, __nv_bfloat16) X(128, __half) X(256, __nv_bfloat16) X(256, __half)'
} > "$build/gen/dashattn_cuda_instances.h"
srcs=()
for hd in 64 128 256; do
  for dt in bf16 f16; do
    ct=__nv_bfloat16; [ "$dt" = f16 ] && ct=__half
    out="$build/gen/attend_hdim${hd}_${dt}.cu"
    sed -e "s/@DASHATTN_HDIM@/$hd/g; s/@DASHATTN_CTYPE@/$ct/g; s/@DASHATTN_DTYPE_NAME@/$dt/g" \
      "$root/backends/cuda/attend_instance.cu.in" > "$out"
    srcs+=("$out")
  done
done
srcs+=("$root/backends/cuda/attend_launch.cu" "$root/backends/cuda/dense_launch.cu"
       "$root/tests/cuda_attend/attend_check.cu" "$root/tests/cuda_attend/attend_bench.cu"
       "$root/tests/cuda_attend/attend_standalone.cu" "$root/tests/cuda_attend/standalone_support.cu"
       "$root/core/src/error.cpp" "$root/core/src/names.cpp")
nvcc=${NVCC:-nvcc}
flags=(-std=c++17 -O3 --expt-relaxed-constexpr -lineinfo "-gencode=arch=compute_${arch},code=sm_${arch}"
       -I"$root/backends/cuda" -I"$build/gen" -I"$root/core/include" -I"$root/tests/cuda_attend")
objs=()
pids=()
for s in "${srcs[@]}"; do
  o="$build/$(basename "${s%.*}").o"
  objs+=("$o")
  if [[ "$s" == *.cpp ]]; then
    "$nvcc" "${flags[@]}" -x cu -c "$s" -o "$o" &
  else
    "$nvcc" "${flags[@]}" -c "$s" -o "$o" &
  fi
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
"$nvcc" "${flags[@]}" "${objs[@]}" -o "$build/attend_standalone"
"$build/attend_standalone" "$@"
