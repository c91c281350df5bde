#!/usr/bin/env python3
"""Interoperability of libdashattn's tensor files with NumPy (and the safetensors package, when installed).

usage: numpy_interop.py TENSORIO_CONVERT WORKDIR

Files written by numpy.save / savez / savez_compressed (and safetensors.numpy.save_file) must load through
libdashattn, and what libdashattn writes must load in NumPy (and safetensors) with identical dtypes, shapes and
values. Exits 77 (skipped) when numpy cannot be imported.
"""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not importable: skipping")
    sys.exit(77)

CONVERT, WORKDIR = sys.argv[1], sys.argv[2]
os.makedirs(WORKDIR, exist_ok=True)
failures = []


def path(name):
    return os.path.join(WORKDIR, name)


def convert(src, dst, expect_error=None):
    proc = subprocess.run([CONVERT, src, dst], capture_output=True, text=True)
    if expect_error is None:
        if proc.returncode != 0:
            failures.append(f"convert {src} -> {dst} failed: {proc.stderr.strip()}")
            return False
        return True
    if proc.returncode == 0 or expect_error not in proc.stderr:
        failures.append(f"convert {src}: expected an error containing {expect_error!r}, got rc={proc.returncode} "
                        f"stderr={proc.stderr.strip()!r}")
    return False


def check_same(label, expected, got):
    if expected.dtype != got.dtype or expected.shape != got.shape or expected.tobytes() != got.tobytes():
        failures.append(f"{label}: expected {expected.dtype}{expected.shape}, got {got.dtype}{got.shape} "
                        f"(or different values)")


def sample(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


DTYPES = ["<f4", "<f2", "<f8", "<i4", "<u4", "|u1"]
SHAPES = [(), (3,), (2, 3), (2, 1, 3), (1, 2, 3, 2), (1, 1, 2, 1, 2), (0, 4), (123456, 1)]
arrays = {}
for i, dtype in enumerate(DTYPES):
    for j, shape in enumerate(SHAPES):
        arrays[f"a{i}_{j}"] = sample(dtype, shape, 10 * i + j)

# .npy: numpy's files load, and libdashattn writes byte-identical files.
for name, array in arrays.items():
    theirs, ours = path(f"{name}.npy"), path(f"{name}_ours.npy")
    np.save(theirs, array)
    if convert(theirs, ours):
        check_same(f"npy {name}", array, np.load(ours))
        with open(theirs, "rb") as a, open(ours, "rb") as b:
            if a.read() != b.read():
                failures.append(f"npy {name}: bytes differ from numpy.save")

# Big-endian input is byte-swapped to little-endian.
big = np.arange(6, dtype=">f4").reshape(2, 3)
np.save(path("big.npy"), big)
if convert(path("big.npy"), path("big_ours.npy")):
    check_same("big-endian", big.astype("<f4"), np.load(path("big_ours.npy")))

# Layouts and dtypes that are refused.
np.save(path("fortran.npy"), np.asfortranarray(np.ones((2, 3), np.float32)))
convert(path("fortran.npy"), path("x.npy"), expect_error="fortran_order")
np.save(path("object.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
convert(path("object.npy"), path("x.npy"), expect_error="pickled object")
np.save(path("int64.npy"), np.arange(3, dtype=np.int64))
convert(path("int64.npy"), path("x.npy"), expect_error="unsupported dtype descr '<i8'")

# .npz: savez (stored, zip64 local headers) and savez_compressed (deflate).
np.savez(path("plain.npz"), **arrays)
if convert(path("plain.npz"), path("plain_ours.npz")):
    with np.load(path("plain_ours.npz")) as z:
        if sorted(z.files) != sorted(arrays):
            failures.append("npz: member names differ")
        for name, array in arrays.items():
            check_same(f"npz {name}", array, z[name])

np.savez_compressed(path("compressed.npz"), **arrays)
proc = subprocess.run([CONVERT, path("compressed.npz"), path("compressed_ours.safetensors")],
                      capture_output=True, text=True)
if proc.returncode != 0:
    if "compressed npz" not in proc.stderr:
        failures.append(f"savez_compressed: unexpected error {proc.stderr.strip()}")
    else:
        print("compressed npz: not supported by this build (no zlib), refused clearly")
elif convert(path("compressed_ours.safetensors"), path("compressed_ours.npz")):
    with np.load(path("compressed_ours.npz")) as z:
        for name, array in arrays.items():
            check_same(f"savez_compressed {name}", array, z[name])

# safetensors, against the reference implementation when it is installed.
try:
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError:
    print("safetensors is not importable: skipping the safetensors checks")
else:
    # Reading theirs and writing it back reproduces the library's bytes exactly. (With one metadata key: the
    # library writes metadata in hash-map order, which varies from run to run.)
    save_file(arrays, path("theirs.safetensors"), metadata={"format": "np"})
    if convert(path("theirs.safetensors"), path("ours.safetensors")):
        with open(path("theirs.safetensors"), "rb") as a, open(path("ours.safetensors"), "rb") as b:
            if a.read() != b.read():
                failures.append("safetensors: rewritten file differs from the library's bytes")
    metadata = {"format": "np", "note": "ünïcode", "z": ""}
    save_file({"x": arrays["a0_2"]}, path("meta.safetensors"), metadata=metadata)
    if convert(path("meta.safetensors"), path("meta_ours.safetensors")):
        with safe_open(path("meta_ours.safetensors"), "np") as f:
            if f.metadata() != metadata:
                failures.append(f"safetensors: metadata {f.metadata()} != {metadata}")
    # A file we write from scratch (from an .npz) loads in the library.
    if convert(path("plain.npz"), path("from_npz.safetensors")):
        loaded = load_file(path("from_npz.safetensors"))
        for name, array in arrays.items():
            check_same(f"safetensors {name}", array, loaded[name])

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"numpy interop: {len(arrays)} arrays checked through .npy, .npz and safetensors: OK")
