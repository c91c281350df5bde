"""pytest setup: find the dashattn package (installed, or a CMake build tree) and shared helpers."""

import importlib.util
import os
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # reference.py

if importlib.util.find_spec("dashattn") is None:
    root = HERE.parent.parent
    for candidate in [os.environ.get("DASHATTN_PYTHONPATH", "")] + sorted(
            str(p) for p in root.glob("build*/bindings/python")):
        if candidate and (pathlib.Path(candidate) / "dashattn").is_dir():
            sys.path.insert(0, candidate)
            break


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cuda_available() -> bool:
    if not has_module("torch"):
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    import dashattn

    return any(b["name"] == "cuda" and b["available"] for b in dashattn.backends())


requires_torch = pytest.mark.skipif(not has_module("torch"), reason="torch is not installed")
requires_transformers = pytest.mark.skipif(not (has_module("torch") and has_module("transformers")),
                                           reason="torch and transformers are not installed")
requires_cuda = pytest.mark.skipif(not cuda_available(),
                                   reason="no CUDA device, or dashattn built without the CUDA backend")


def raw_bits(x):
    """x as a NumPy array of its raw bits, for bitwise comparisons: torch tensors of any device and dtype (16-bit
    floats and uint32 viewed as integers of their size), NumPy arrays as they are."""
    if isinstance(x, np.ndarray):
        return x
    import torch

    same_size = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.uint32: torch.int32}
    return x.view(same_size.get(x.dtype, x.dtype)).cpu().numpy()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def cpu_backend_available() -> bool:
    import dashattn

    return any(b["name"] == "cpu" and b["available"] for b in dashattn.backends())


requires_cpu_backend = pytest.mark.skipif(not cpu_backend_available(),
                                          reason="dashattn built without the CPU backend")


def pytest_collection_modifyitems(config, items):
    # A GPU machine may build the package without the CPU backend (no Highway/oneTBB there): every test that is
    # not a GPU test runs on CPU arrays and is skipped then, with the reason shown.
    if cpu_backend_available():
        return
    skip = pytest.mark.skip(reason="dashattn built without the CPU backend")
    for item in items:
        if "gpu" not in item.keywords:
            item.add_marker(skip)
