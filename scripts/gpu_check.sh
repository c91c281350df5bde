#!/usr/bin/env bash
# One command on a CUDA machine: configure + build with the CUDA backend, run the CPU and GPU test suites,
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on the reduced GPU tests, then the benchmark.
# Logs go to $OUT (default ./gpu-check-out); a short summary table is printed last.
#   scripts/gpu_check.sh [--no-bench] [--sizes 16384,32768,65536] [--arch 90a]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCH=90a
SIZES=16384,32768,65536
BENCH=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) BENCH=0 ;;
    --sizes) SIZES=$2; shift ;;
    --arch) ARCH=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
JOBS=$(nproc)
summary=()
failed=0  # the exit status: 1 when a build target, a test or a sanitizer check failed
note() { summary+=("$1"); echo "== $1"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } 2>&1 | tee "$OUT/env.log"

bench_flag=OFF
[ -f bench/CMakeLists.txt ] && bench_flag=ON
# A GPU machine without the Debian packages: the header-only test dependencies (nlohmann-json, doctest, Eigen) can
# come in .gpubuild/prefix, made by scripts/stage_gpu_deps.sh on a machine that has them; the CPU backend and the
# CLI need compiled packages and are left out there.
extra=()
if [ -d .gpubuild/prefix ]; then
  extra+=(-DCMAKE_PREFIX_PATH="$PWD/.gpubuild/prefix")
  cmake --find-package -DNAME=hwy -DCOMPILER_ID=GNU -DLANGUAGE=CXX -DMODE=EXIST >/dev/null 2>&1 ||
    extra+=(-DDASHATTN_WITH_CPU=OFF -DDASHATTN_BUILD_CLI=OFF)
fi
t0=$(date +%s)
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDASHATTN_WITH_CUDA=ON \
     -DDASHATTN_CUDA_ARCHITECTURES="$ARCH" -DDASHATTN_BUILD_BENCH=$bench_flag "${extra[@]}" >"$OUT/build.log" 2>&1; then
  note "configure: FAILED (see build.log)"; tail -40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1
fi
# Keep going past failing targets so that one broken test area does not hide the others.
if ninja -C "$BUILD" -k 0 -j"$JOBS" >>"$OUT/build.log" 2>&1; then
  note "build: ok ($(( $(date +%s) - t0 )) s)"
else
  failed=1
  note "build: some targets FAILED ($(( $(date +%s) - t0 )) s): $(grep -c '^FAILED' "$OUT/build.log") failures"
  grep -A4 '^FAILED' "$OUT/build.log" | grep -E 'FAILED|error' | head -12
fi

# The test suites run while the sanitizers run (both are short on the GPU); the benchmark runs alone afterwards.
timeout 200 ctest --test-dir "$BUILD" --output-on-failure -j8 --timeout 180 >"$OUT/ctest.log" 2>&1 &
ctest_pid=$!

: >"$OUT/sanitizer.log"
for t in "$BUILD"/tests/cuda/test_cuda_*; do
  [ -x "$t" ] || continue
  # Suites with a reduced grid ("cuda small grid" cases) run only those; the others (the paged suites) run whole,
  # racecheck with more time. A filter that selects no case would report a clean run of nothing: that fails.
  filter=()
  "$t" --list-test-cases 2>/dev/null | grep -q '^cuda small grid' && filter=(-tc='cuda small grid*')
  for tool in memcheck racecheck initcheck synccheck; do
    limit=$([ ${#filter[@]} -eq 0 ] && [ $tool = racecheck ] && echo 300 || echo 120)
    timeout $limit compute-sanitizer --tool $tool --error-exitcode 3 "$t" "${filter[@]}" >"$OUT/sanitizer_one.log" 2>&1
    rc=$?
    grep -qE 'test cases: +0 \|' "$OUT/sanitizer_one.log" && rc=nothing-ran
    cat "$OUT/sanitizer_one.log" >>"$OUT/sanitizer.log"
    [ "$rc" = 0 ] || failed=1
    note "sanitizer $tool $(basename "$t"): $([ "$rc" = 0 ] && echo clean || echo "rc=$rc")"
  done
done
rm -f "$OUT/sanitizer_one.log"

# The d = 128 warpgroup (wgmma) Stage-2 kernel, the bias table staged in the ring (one round and several), the
# decode split and the paged cases, on a reduced set of the conformance cases.
att="$BUILD/tests/cuda_attend/test_cuda_attend_kernels"
if [ -x "$att" ]; then
  for tool in memcheck racecheck initcheck synccheck; do
    ATTEND_CASES="wgmma g16|wgmma chunk masks est lengths|wgmma varlen|wgmma chunk masks raw|split 3|table rounds|prior raw g16 7 warps|wgmma padded warpgroups|wgmma 3 stages|wgmma one tile per union|wgmma g2 chunk masks|paged" \
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$att" >>"$OUT/sanitizer.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=1
    note "sanitizer $tool test_cuda_attend_kernels (wgmma + split cases): $([ $rc -eq 0 ] && echo clean || echo "rc=$rc")"
  done
fi

wait $ctest_pid || failed=1
note "ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
grep -E "\*\*\*|Failed  " "$OUT/ctest.log" | head -20

if [ $BENCH = 1 ]; then
  if [ -x "$BUILD/bench/gpu/dashattn_gpu_bench" ]; then
    python3 bench/gpu/run_gpu_bench.py --bench "$BUILD/bench/gpu/dashattn_gpu_bench" --sizes "$SIZES" \
      --out "$OUT" --timeout 170 >"$OUT/bench.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=1
    note "bench: rc=$rc"
  else
    note "bench: binary missing"
  fi
fi
echo
printf '%s\n' "${summary[@]}"
if [ -f "$OUT/table.md" ]; then cat "$OUT/table.md"; fi
exit $failed
