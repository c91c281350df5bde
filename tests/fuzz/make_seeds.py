#!/usr/bin/env python3
"""Regenerates the committed fuzz seeds in seeds/ from NumPy and the safetensors package: small, valid files of
every supported dtype, as those libraries write them (the fuzzers mutate from there).

usage: make_seeds.py [SEED_DIR]   (default: seeds/ next to this script)
"""
import os
import sys

import numpy as np

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
for sub in ("npy", "npz", "safetensors"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)

arrays = {
    "f32": np.arange(6, dtype="<f4").reshape(2, 3),
    "f16": np.array([1.5, -2.0], dtype="<f2"),
    "f64": np.array(3.25, dtype="<f8"),
    "i32": np.arange(4, dtype="<i4").reshape(1, 2, 2, 1),
    "u32": np.array([7], dtype="<u4"),
    "u8": np.zeros((0, 3), dtype="|u1"),
}
for name, a in arrays.items():
    np.save(os.path.join(root, "npy", f"{name}.npy"), a)
np.save(os.path.join(root, "npy", "big_endian.npy"), np.arange(3, dtype=">f4"))
with open(os.path.join(root, "npy", "v2.npy"), "wb") as f:
    np.lib.format.write_array(f, arrays["f32"], version=(2, 0))

np.savez(os.path.join(root, "npz", "savez.npz"), q=arrays["f32"], lens=arrays["i32"])
np.savez_compressed(os.path.join(root, "npz", "savez_compressed.npz"), k=arrays["f16"], s=arrays["f64"])
np.savez(os.path.join(root, "npz", "empty.npz"))

try:
    from safetensors.numpy import save_file
except ImportError:
    print("safetensors not importable: safetensors seeds not regenerated")
else:
    save_file(arrays, os.path.join(root, "safetensors", "all_dtypes.safetensors"), metadata={"format": "np"})
    save_file({"x": arrays["u8"]}, os.path.join(root, "safetensors", "empty_tensor.safetensors"))
