#!/usr/bin/env bash
# Runs the Python package's tests against the extension built by scripts/build.sh (build/bindings/python).
# Tests that need torch, transformers or a GPU skip when those are missing.
set -uo pipefail
cd "$(dirname "$0")/.."
export DASHATTN_PYTHONPATH=${DASHATTN_PYTHONPATH:-$PWD/build/bindings/python}
if [ ! -d "$DASHATTN_PYTHONPATH/dashattn" ]; then
  echo "python tests: no package at $DASHATTN_PYTHONPATH (build with nanobind installed)"
  exit 1
fi
python3 -m pytest -q tests/python
rc=$?
[ $rc -eq 5 ] && { echo "python tests: no test collected"; exit 1; }
exit $rc
