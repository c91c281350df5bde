#!/usr/bin/env bash
# One command on a CUDA machine (python3 with torch, transformers, nanobind and scikit-build-core; no network):
# builds and installs the dashattn Python package with the CUDA backend, then runs the Python tests, GPU tests
# included, and prints a summary. Logs go to $OUT (default ./python-gpu-check-out).
#   scripts/python_gpu_check.sh [--arch 90a] [--gpu-only]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/python-gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
ARCH=90a
GPU_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH=$2; shift ;;
    --gpu-only) GPU_ONLY=1 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
summary=()
note() { summary+=("$1"); echo "== $1"; }
finish() { echo; echo "== summary"; printf '  %s\n' "${summary[@]}"; exit "$1"; }

export PATH="$PATH:/usr/local/cuda/bin"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1
  cmake --version | head -1
  $PY - <<'PY'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "transformers", "nanobind", "scikit_build_core", "numpy", "pytest", "ml_dtypes"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "?"))
    except Exception as exc:  # report and go on: missing optional packages only skip tests
        print(name, "unavailable:", exc)
import torch
print("torch cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PY
} 2>&1 | tee "$OUT/env.log"

# The same dependency arrangement as scripts/gpu_check.sh: header-only packages may come in .gpubuild/prefix;
# without Highway/oneTBB the CPU backend is left out (the NumPy/CPU tests then skip).
cmake_args="-DDASHATTN_CUDA_ARCHITECTURES=$ARCH"
if [ -d .gpubuild/prefix ]; then
  cmake_args="$cmake_args -DCMAKE_PREFIX_PATH=$PWD/.gpubuild/prefix"
fi
if ! cmake --find-package -DNAME=hwy -DCOMPILER_ID=GNU -DLANGUAGE=CXX -DMODE=EXIST >/dev/null 2>&1; then
  cmake_args="$cmake_args -DDASHATTN_WITH_CPU=OFF"
  note "Highway not found: building without the CPU backend"
fi
export CMAKE_ARGS="$cmake_args"
export DASHATTN_WITH_CUDA=ON
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

t0=$(date +%s)
if $PY -m pip install --no-build-isolation --no-deps -v . >"$OUT/build.log" 2>&1; then
  note "build + install: ok ($(( $(date +%s) - t0 )) s, CMAKE_ARGS=$cmake_args)"
else
  note "build + install: FAILED ($(( $(date +%s) - t0 )) s; see build.log)"
  grep -E "error|Error|FAILED" "$OUT/build.log" | head -30
  tail -30 "$OUT/build.log"
  finish 1
fi

# Run the tests from outside the source tree so the installed package (not bindings/python) is imported.
cd "$OUT"
$PY -c "import dashattn, json; print(json.dumps(dashattn.build_info())); print(dashattn.backends())" 2>&1 |
  tee "$OUT/backends.log"
if ! grep -q "'name': 'cuda'.*'available': True" "$OUT/backends.log"; then
  note "CUDA backend: NOT available (see backends.log)"
else
  note "CUDA backend: available"
fi
selection=()
[ "$GPU_ONLY" = 1 ] && selection=(-m gpu)
t0=$(date +%s)
$PY -m pytest "$OLDPWD/tests/python" "${selection[@]}" -v -rs -p no:cacheprovider \
    --junitxml="$OUT/pytest.xml" >"$OUT/pytest.log" 2>&1
rc=$?
tail -n 40 "$OUT/pytest.log"
gpu_pass=$(grep -cE "test_gpu.py::.* PASSED" "$OUT/pytest.log")
gpu_fail=$(grep -cE "test_gpu.py::.* (FAILED|ERROR)" "$OUT/pytest.log")
gpu_skip=$(grep -cE "test_gpu.py::.* SKIPPED" "$OUT/pytest.log")
note "pytest: rc=$rc ($(( $(date +%s) - t0 )) s) $(tail -n 1 "$OUT/pytest.log" | tr -d '=')"
note "GPU tests: $gpu_pass passed, $gpu_fail failed, $gpu_skip skipped"
finish $rc
