#!/usr/bin/env bash
# Installs the built library into a temporary prefix and builds a small consumer project against it with
# find_package(dashattn), then runs it: proves the exported package works from an install tree.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix/install" >/dev/null
cmake -S tests/consumer -B "$prefix/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix/install" >/dev/null
cmake --build "$prefix/build" >/dev/null
"$prefix/build/consumer"
