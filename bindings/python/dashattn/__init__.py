"""dashattn: DashAttention, differentiable and adaptive sparse hierarchical attention.

Array API (any DLPack-capable arrays: torch, NumPy, CuPy, JAX; GPU arrays run on the GPU backend):

    o = dashattn.forward(q, k, v, summary_query)             # prefill, decode (n_q < n_k) or packed varlen
    routing = dashattn.route(q, k, summary_query)             # mask, tau, mu, active chunks, .stats()
    o = dashattn.attend(q, k, v, routing)
    dec = dashattn.Decoder(b, h_q, h_kv, d, dtype="bf16", device="cuda"); o = dec.step(q, k, v)

PyTorch: ``dashattn.torch`` (custom op for torch.compile, ``DashAttention`` module). Hugging Face transformers:
``import dashattn.hf`` registers ``attn_implementation="dash"``.
"""

from . import _core
from ._api import Routing, attend, dense_attention, forward, method, route, summarize
from ._decoder import Decoder
from .errors import (BackendUnavailableError, BackwardNotAvailableError, DashattnError, DashattnIOError,
                     DTypeError, InternalError, InvalidArgumentError, OutOfMemoryError, UnsupportedError)

__version__ = _core.__version__

__all__ = [
    "__version__", "forward", "summarize", "route", "attend", "dense_attention", "Routing", "Decoder",
    "backends", "build_info", "method",
    "DashattnError", "InvalidArgumentError", "DTypeError", "UnsupportedError", "BackendUnavailableError",
    "DashattnIOError", "OutOfMemoryError", "InternalError", "BackwardNotAvailableError",
]


def backends() -> list:
    """Every backend compiled into this build: name, device, priority, available, and a description (or the
    reason it is unavailable, e.g. no GPU present)."""
    return _core.backends()


def build_info() -> dict:
    """Version and build options of the installed package."""
    return {
        "version": __version__,
        "compiled_backends": list(_core.compiled_backends),
        "available_backends": [b["name"] for b in _core.backends() if b["available"]],
    }
