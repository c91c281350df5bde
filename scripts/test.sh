#!/usr/bin/env bash
# Quick start, step 2: install dependencies, build, and run the whole test suite: the C++ suites (GPU suites skip
# without a GPU), the install-tree consumer build, a short fuzz run of every tensor-file reader, and the Python
# package's tests. Ends with one summary line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
passed=0; failed=0; failures=()
step() {  # step NAME COMMAND...: runs a step, counts it
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
}

step build scripts/build.sh
step ctest ctest --test-dir build --output-on-failure -j "$(nproc)"
step install-consumer scripts/check_consumer.sh
[ -x scripts/fuzz.sh ] && step fuzz scripts/fuzz.sh "${DASHATTN_FUZZ_SECONDS:-10}"
[ -x scripts/python_tests.sh ] && step python scripts/python_tests.sh

echo
[ ${#failures[@]} -gt 0 ] && echo "failed steps: ${failures[*]}"
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
