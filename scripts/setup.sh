#!/usr/bin/env bash
# Installs everything libdashattn needs to build and test on a fresh Debian machine (idempotent, quiet when
# everything is present). Debian packages via apt-get, Python packages via pip.
set -euo pipefail

apt_packages=(cmake ninja-build g++ clang libhwy-dev libtbb-dev libcli11-dev doctest-dev libeigen3-dev
              nlohmann-json3-dev libpng-dev zlib1g-dev python3-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py_packages=(numpy pytest nanobind scikit-build-core)
py_missing=()
for p in "${py_packages[@]}"; do
  python3 -c "import ${p//-/_}" 2>/dev/null || py_missing+=("$p")
done
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${py_missing[*]}"
  python3 -m pip install -q --disable-pip-version-check "${py_missing[@]}"
fi
