#!/usr/bin/env bash
# Builds the tensor-file fuzzers (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer, clang) in their own
# build directory and runs each for SECONDS seconds (default 20), starting from tests/fuzz/seeds.
#
#   scripts/fuzz.sh [SECONDS]
#
# Exits non-zero as soon as a fuzzer finds a crash, leak, sanitizer report or uncaught exception; the input that
# triggered it is saved as build-fuzz/artifacts/<target>-crash-* (reproduce: build-fuzz/tests/fuzz/<target> FILE).
# Environment: DASHATTN_FUZZ_BUILD_DIR (default build-fuzz), CC/CXX (default clang/clang++), DASHATTN_FUZZ_JOBS.
set -euo pipefail

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -eq 0 ]]; then
  echo "usage: $0 [SECONDS]   (a positive number of seconds per fuzzer, default 20)" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DASHATTN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${DASHATTN_FUZZ_JOBS:-2}"

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDASHATTN_BUILD_FUZZERS=ON -DDASHATTN_BUILD_TESTS=ON \
  -DDASHATTN_WITH_CPU=OFF -DDASHATTN_WITH_CUDA=OFF -DDASHATTN_WITH_HIP=OFF \
  -DDASHATTN_BUILD_CLI=OFF -DDASHATTN_BUILD_BENCH=OFF -DDASHATTN_BUILD_PYTHON=OFF >/dev/null
ninja -C "$build" -j "$jobs" fuzz_safetensors fuzz_npy fuzz_npz

mkdir -p "$build/artifacts"
status=0
for format in safetensors npy npz; do
  target="fuzz_$format"
  corpus="$build/corpus/$format"  # grows across runs; the committed seeds stay untouched
  mkdir -p "$corpus"
  dict="$root/tests/fuzz/$format.dict"
  [[ -f "$dict" ]] || dict="$root/tests/fuzz/npy.dict"
  echo "== $target for ${seconds}s"
  if ! "$build/tests/fuzz/$target" "$corpus" "$root/tests/fuzz/seeds/$format" \
      -dict="$dict" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" 2>"$build/$target.log"; then
    tail -n 60 "$build/$target.log" >&2
    echo "FAILED: $target (log: $build/$target.log)" >&2
    status=1
  else
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" "$build/$target.log" || true
  fi
done
exit "$status"
