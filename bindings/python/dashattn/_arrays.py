"""Framework plumbing: which framework an array comes from, allocation of outputs in that framework, dtype names.

The extension module reads every array through DLPack and never allocates outputs itself. This module allocates
them next to the inputs (torch in, torch out; NumPy in, NumPy out), so results land on the input's device and,
for torch, in its caching allocator. Frameworks it does not know (CuPy, JAX, ...) get memory from the library's
own allocator, handed over with ``from_dlpack``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from . import _core
from .errors import DTypeError, InvalidArgumentError

try:  # NumPy has no bfloat16; ml_dtypes provides one when installed.
    import ml_dtypes as _ml_dtypes  # type: ignore

    _NP_BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    _NP_BF16 = None

_NAMES = {
    "f32": "f32", "float32": "f32", "float": "f32", "fp32": "f32",
    "f16": "f16", "float16": "f16", "half": "f16", "fp16": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32", "u32": "u32", "uint32": "u32", "f64": "f64", "float64": "f64",
}


def _torch():
    """The torch module if the caller already imported it (we never import torch just to inspect an array)."""
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def dtype_name(dtype: Any) -> str:
    """Canonical short name ('f32', 'f16', 'bf16', ...) of a dtype given as a string, torch, NumPy or other dtype."""
    if isinstance(dtype, str):
        key = dtype.lower().replace("torch.", "")
    elif isinstance(dtype, type) and issubclass(dtype, np.generic):  # np.float32 and friends
        key = np.dtype(dtype).name
    else:
        key = str(dtype).lower().replace("torch.", "").replace("dtype(", "").strip("')\"")
    try:
        return _NAMES[key]
    except KeyError:
        raise DTypeError(f"invalid argument 'dtype': expected f32, f16 or bf16, got {dtype!r}") from None


@dataclass(frozen=True)
class Frame:
    """Where an array lives and how to allocate arrays like it."""

    kind: str  # "torch", "numpy" or "dlpack"
    device: str  # "cpu", "cuda" or "hip"
    device_id: int
    like: Any  # the array itself (torch device / array namespace come from it)

    def empty(self, shape: Sequence[int], dtype: str) -> Any:
        """Uninitialized array of dtype name `dtype` ('f32', 'bf16', 'i32', 'u32', ...) next to `like`."""
        shape = tuple(int(s) for s in shape)
        if self.kind == "torch":
            t = _torch()
            return t.empty(shape, dtype=_TORCH_DTYPES(t)[dtype], device=self.like.device)
        if self.kind == "numpy":
            return np.empty(shape, dtype=numpy_dtype(dtype))
        return _core.empty(list(shape), dtype, self.device, self.device_id)

    def wrap(self, raw: Any) -> Any:
        """The framework array for something `empty` returned (identity except for the DLPack fallback)."""
        if self.kind != "dlpack" or raw is None:
            return raw
        xp = array_namespace(self.like)
        return xp.from_dlpack(raw)

    def to_device_int32(self, values: Any, name: str) -> Any:
        """`values` (list, NumPy or an array of this framework) as a contiguous int32 array on this device."""
        if values is None:
            return None
        if self.kind == "torch":
            t = _torch()
            if isinstance(values, t.Tensor):
                if values.dtype != t.int32:
                    raise DTypeError(f"invalid argument '{name}.dtype': expected int32, got {values.dtype}")
                if values.device != self.like.device:
                    raise InvalidArgumentError(
                        f"invalid argument '{name}.device': expected {self.like.device} (the device of q), "
                        f"got {values.device}")
                return values.contiguous()
            return t.as_tensor(np.asarray(values, dtype=np.int32), device=self.like.device)
        if self.kind == "numpy":
            arr = np.asarray(values)
            if arr.dtype.kind not in "iu":
                raise DTypeError(f"invalid argument '{name}.dtype': expected int32, got {arr.dtype}")
            return np.ascontiguousarray(arr, dtype=np.int32)
        if hasattr(values, "__dlpack__") and not isinstance(values, np.ndarray):
            return values  # already an array of the caller's framework; the extension checks dtype and device
        xp = array_namespace(self.like)
        return xp.asarray(np.asarray(values, dtype=np.int32))

    def stream(self, explicit: Optional[int]) -> int:
        """The stream pointer to run on: explicit, torch's / CuPy's current stream, or 0 (the default stream)."""
        if explicit is not None:
            return int(explicit)
        if self.device == "cpu":
            return 0
        if self.kind == "torch":
            return int(_torch().cuda.current_stream(self.like.device).cuda_stream)
        cupy = sys.modules.get("cupy")
        if cupy is not None and isinstance(self.like, cupy.ndarray):
            return int(cupy.cuda.get_current_stream().ptr)
        return 0


def _TORCH_DTYPES(t):
    return {"f32": t.float32, "f16": t.float16, "bf16": t.bfloat16, "i32": t.int32, "u32": t.uint32,
            "f64": t.float64, "u8": t.uint8}


def numpy_dtype(name: str) -> np.dtype:
    if name == "bf16":
        if _NP_BF16 is None:
            raise DTypeError("bfloat16 NumPy arrays need the ml_dtypes package (or use torch tensors)")
        return _NP_BF16
    return np.dtype({"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
                     "u32": np.uint32, "u8": np.uint8}[name])


def array_namespace(x: Any) -> Any:
    if hasattr(x, "__array_namespace__"):
        return x.__array_namespace__()
    mod = sys.modules.get(type(x).__module__.split(".")[0])
    if mod is None or not hasattr(mod, "from_dlpack"):
        raise TypeError(f"cannot allocate outputs for arrays of type {type(x).__name__}; pass `out=`")
    return mod


_DLPACK_DEVICES = {1: "cpu", 3: "cpu", 11: "cpu", 2: "cuda", 13: "cuda", 10: "hip"}


def frame_of(x: Any, name: str = "q") -> Frame:
    if is_torch(x):
        dev = x.device
        kind = dev.type if dev.type in ("cpu", "cuda") else None
        if kind is None:
            raise InvalidArgumentError(f"invalid argument '{name}.device': expected a CPU or CUDA tensor, got {dev}")
        if kind == "cuda" and getattr(_torch().version, "hip", None):
            kind = "hip"
        return Frame("torch", kind, dev.index or 0, x)
    if isinstance(x, np.ndarray):
        return Frame("numpy", "cpu", 0, x)
    if hasattr(x, "__dlpack_device__"):
        dev_type, dev_id = x.__dlpack_device__()
        device = _DLPACK_DEVICES.get(int(dev_type))
        if device is None:
            raise InvalidArgumentError(f"invalid argument '{name}.device': expected CPU, CUDA or ROCm memory, "
                                       f"got DLPack device type {int(dev_type)}")
        return Frame("dlpack", device, int(dev_id), x)
    raise TypeError(f"argument '{name}': expected a DLPack-capable array (torch, NumPy, CuPy, JAX, ...), "
                    f"got {type(x).__name__}")


def dtype_of(x: Any) -> str:
    """Short dtype name of an array."""
    return dtype_name(x.dtype)


def for_core(x: Any) -> tuple:
    """(array the extension can import, whether it is bf16 stored as uint16)."""
    if x is None:
        return None, False
    if is_torch(x):
        return (x.detach() if x.requires_grad else x), False
    if _NP_BF16 is not None and isinstance(x, np.ndarray) and x.dtype == _NP_BF16:
        return x.view(np.uint16), True
    return x, False


def host_numpy(x: Any) -> Optional[np.ndarray]:
    """A host NumPy copy/view of any supported array (for statistics and checks)."""
    if x is None:
        return None
    if is_torch(x):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return x.get()
    return np.from_dlpack(x) if x.__dlpack_device__()[0] == 1 else np.asarray(x)
