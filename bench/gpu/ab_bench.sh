#!/usr/bin/env bash
# A/B timing of two or more builds of dashattn_gpu_bench on one GPU: the binaries run alternately, round after
# round, so that clock and thermal drift hit every variant alike; each run is bounded by a timeout, so a variant
# that hangs costs one timeout and is reported, not the whole session. Prints each run's table rows, labelled.
#   bench/gpu/ab_bench.sh [--rounds 2] [--timeout 120] BIN_A BIN_B [...] [-- bench options]
# Bench options default to --prefill-only --sizes 32768,65536 (see README.md for the others).
set -uo pipefail
rounds=2
limit=120
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --timeout) limit=$2; shift ;;
    --) shift; break ;;
    *) bins+=("$1") ;;
  esac
  shift
done
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--prefill-only --sizes 32768,65536)
if [ ${#bins[@]} -lt 2 ]; then
  echo "usage: $0 [--rounds N] [--timeout S] BIN_A BIN_B [...] [-- bench options]" >&2
  exit 2
fi
for ((r = 1; r <= rounds; ++r)); do
  for b in "${bins[@]}"; do
    out=$(timeout "$limit" "$b" "${opts[@]}" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "$(basename "$b") round $r: rc=$rc$([ $rc -eq 124 ] && echo " (timed out after ${limit} s)")"
      continue
    fi
    # The table rows (after the header separator), each prefixed with the variant and the round.
    printf '%s\n' "$out" | awk -v tag="$(basename "$b") r$r" '/^\|---/ { rows = 1; next } !/^\|/ || /^\| mode/ { rows = 0 } rows { print tag " " $0 }'
  done
done
