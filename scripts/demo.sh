#!/usr/bin/env bash
# Quick start, step 1: install dependencies, build, and run the demo on the best available backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/cli/dashattn demo "$@"
