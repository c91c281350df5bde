#!/usr/bin/env bash
# Copies the header-only build dependencies (nlohmann-json, doctest, Eigen) from this machine's Debian packages into
# .gpubuild/prefix, for a GPU machine that has the CUDA toolkit but none of those packages and no network.
# scripts/gpu_check.sh and scripts/python_gpu_check.sh pick the prefix up when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
prefix=.gpubuild/prefix
rm -rf "$prefix"
mkdir -p "$prefix/include" "$prefix/share/cmake" "$prefix/lib/cmake" "$prefix/share"
cp -r /usr/include/nlohmann "$prefix/include/"
cp -r /usr/share/cmake/nlohmann_json "$prefix/share/cmake/"
cp -r /usr/include/doctest "$prefix/include/"
cp -r /usr/lib/cmake/doctest "$prefix/lib/cmake/"
cp -r /usr/include/eigen3 "$prefix/include/"
cp -r /usr/share/eigen3 "$prefix/share/"
du -sh "$prefix"
