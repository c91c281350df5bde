"""PyTorch integration: a custom op (torch.compile traces it without graph breaks), a module holding the learned
summary query, and autograd wiring that reports the missing backward pass clearly.

    from dashattn.torch import dash_attention, DashAttention
    o = dash_attention(q, k, v, summary_query, layout="bhnd")       # q [b, h, n, d]
    attn = DashAttention(num_kv_heads=8, head_dim=128)               # summary query initialized at zero
    o = attn(q, k, v)

Tensors run where they live (CUDA tensors on the CUDA backend on torch's current stream, CPU tensors on the CPU
backend); outputs are new tensors on the same device.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from . import _api
from .errors import BackwardNotAvailableError, InvalidArgumentError

__all__ = ["dash_attention", "DashAttention"]


def _lse_shape(q: Tensor, layout: str, varlen: bool) -> Tuple[int, ...]:
    if varlen and q.dim() == 3:
        total, heads = (q.shape[1], q.shape[0]) if layout == "bhnd" else (q.shape[0], q.shape[1])
        return (heads, total)
    if layout == "bhnd":
        return (q.shape[0], q.shape[1], q.shape[2])
    return (q.shape[0], q.shape[2], q.shape[1])


def _out_shape(q: Tensor, layout: str, out_layout: str) -> Tuple[int, ...]:
    if layout == out_layout or q.dim() != 4:
        return tuple(q.shape)
    return (q.shape[0], q.shape[2], q.shape[1], q.shape[3])


@torch.library.custom_op("dashattn::forward", mutates_args=())
def _forward_op(q: Tensor, k: Tensor, v: Tensor, summary_query: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
                cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, seqlens_q: Optional[Tensor],
                seqlens_k: Optional[Tensor], layout: str, out_layout: str, chunk_size: int, alpha: float,
                gamma: float, sigma: float, prior: str, scale: float, solver: str, backend: str,
                block_table: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    varlen = cu_seqlens_q is not None
    # A paged call's padded key length: given, or (0) the block table's width times the page size.
    paged_max_k = max_seqlen_k if block_table is not None and max_seqlen_k > 0 else None
    o = q.new_empty(_out_shape(q, layout, out_layout))
    # o in another layout than q: hand the extension a view of o in q's layout (same memory, permuted strides).
    o_view = o if out_layout == layout or q.dim() != 4 else o.transpose(1, 2)
    o_view, lse = _api.forward(
        q, k, v, summary_query, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q if varlen else None, max_seqlen_k=max_seqlen_k if varlen else paged_max_k,
        seqlens_q=seqlens_q, seqlens_k=seqlens_k, block_table=block_table, layout=layout, chunk_size=chunk_size,
        alpha=alpha, gamma=gamma, sigma=sigma, prior=prior, scale=scale if scale > 0 else None, solver=solver,
        return_lse=True, backend=backend, out=o_view)
    return o, lse


@_forward_op.register_fake
def _forward_fake(q, k, v, summary_query, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqlens_q,
                  seqlens_k, layout, out_layout, chunk_size, alpha, gamma, sigma, prior, scale, solver, backend,
                  block_table=None):
    o = q.new_empty(_out_shape(q, layout, out_layout))
    lse = q.new_empty(_lse_shape(q, layout, cu_seqlens_q is not None), dtype=torch.float32)
    return o, lse


def _setup_context(ctx, inputs, output):
    q = inputs[0]
    backend = inputs[19]
    ctx.backend_name = _api.resolve_backend(backend, "cpu" if q.device.type == "cpu" else q.device.type)


def _backward(ctx, grad_o, grad_lse):
    raise BackwardNotAvailableError(
        f"DashAttention backward not available yet on backend '{ctx.backend_name}': the forward pass is "
        f"inference-only for now (call it under torch.no_grad() or detach the inputs)")


torch.library.register_autograd("dashattn::forward", _backward, setup_context=_setup_context)


def _max_len(cu: Optional[Tensor], given: Optional[int]) -> int:
    if given is not None:
        return int(given)
    if cu is None:
        return 0
    # Reads the lengths on the host: a device sync (and a graph break under torch.compile); pass max_seqlen_*
    # to avoid it.
    return int((cu[1:] - cu[:-1]).max().item())


def _int32(x: Optional[Tensor], like: Tensor, name: str) -> Optional[Tensor]:
    if x is None:
        return None
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x, dtype=torch.int32, device=like.device)
    if x.dtype != torch.int32:
        raise InvalidArgumentError(f"invalid argument '{name}.dtype': expected torch.int32, got {x.dtype}")
    return x


def dash_attention(q: Tensor, k: Tensor, v: Tensor, summary_query: Optional[Tensor] = None, *,
                   cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k: Optional[Tensor] = None,
                   max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                   seqlens_q: Optional[Tensor] = None, seqlens_k: Optional[Tensor] = None,
                   block_table: Optional[Tensor] = None, layout: str = "bnhd", out_layout: Optional[str] = None,
                   chunk_size: int = 64, alpha: float = 1.5, gamma: float = 1.0, sigma: float = 1e8,
                   prior: str = "estimate_diagonal", scale: Optional[float] = None, solver: str = "exact",
                   return_lse: bool = False, backend: str = "auto"):
    """DashAttention as a torch op (``torch.ops.dashattn.forward``); arguments as dashattn.forward.

    block_table (int32 [b, max_pages]) makes k and v paged caches [num_pages, page_size, h_kv, d], as in
    flash_attn_with_kvcache, with seqlens_k as its cache_seqlens.

    out_layout: layout of the returned o ("bnhd" or "bhnd"; default: `layout`), e.g. q in [b, h, n, d] and o in
    [b, n, h, d] as attention layers of Hugging Face models want it, without a transpose copy.
    Returns o, or (o, lse) with return_lse.
    """
    out_layout = layout if out_layout is None else out_layout
    for name, value in (("layout", layout), ("out_layout", out_layout)):
        if value not in ("bnhd", "bhnd"):
            raise InvalidArgumentError(f"invalid argument '{name}': expected 'bnhd' or 'bhnd', got {value!r}")
    cu_q = _int32(cu_seqlens_q, q, "cu_seqlens_q")
    cu_k = _int32(cu_seqlens_k, q, "cu_seqlens_k")
    o, lse = torch.ops.dashattn.forward(
        q, k, v, summary_query, cu_q, cu_k, _max_len(cu_q, max_seqlen_q), _max_len(cu_k, max_seqlen_k),
        _int32(seqlens_q, q, "seqlens_q"), _int32(seqlens_k, q, "seqlens_k"), layout, out_layout, int(chunk_size),
        float(alpha), float(gamma), float(sigma), str(prior), 0.0 if scale is None else float(scale), str(solver),
        str(backend), _int32(block_table, q, "block_table"))
    return (o, lse) if return_lse else o


def _forward_with_autograd(q, k, v, summary_query, **kwargs):
    """dashattn.forward's path for torch inputs that require grad: through the op, so autograd is wired."""
    return dash_attention(q, k, v, summary_query, return_lse=True, **kwargs)


class DashAttention(nn.Module):
    """DashAttention with a learned summary query per KV head (Stage 0), initialized at zero as in the paper
    (zero gives mean pooling of each chunk's keys).

    forward(q, k, v, **batch) takes the tensors in `layout` and returns o in `out_layout` (default `layout`);
    keyword arguments cu_seqlens_q/k, max_seqlen_q/k, seqlens_q/k, block_table describe varlen, padded or paged
    batches.
    """

    def __init__(self, num_kv_heads: int, head_dim: int, *, chunk_size: int = 64, alpha: float = 1.5,
                 gamma: float = 1.0, sigma: float = 1e8, prior: str = "estimate_diagonal",
                 scale: Optional[float] = None, layout: str = "bnhd", out_layout: Optional[str] = None,
                 backend: str = "auto", device=None, dtype=None):
        super().__init__()
        self.summary_query = nn.Parameter(torch.zeros(num_kv_heads, head_dim, device=device, dtype=dtype))
        self.chunk_size, self.alpha, self.gamma, self.sigma = chunk_size, alpha, gamma, sigma
        self.prior, self.scale, self.layout, self.out_layout, self.backend = prior, scale, layout, out_layout, backend
        _api.method(chunk_size, alpha, gamma, sigma, prior, scale)  # fail at construction on bad parameters

    def forward(self, q: Tensor, k: Tensor, v: Tensor, **batch) -> Tensor:
        sq = self.summary_query
        if sq.dtype != k.dtype and sq.dtype != torch.float32:
            sq = sq.to(k.dtype)
        return dash_attention(q, k, v, sq, layout=self.layout, out_layout=self.out_layout,
                              chunk_size=self.chunk_size, alpha=self.alpha, gamma=self.gamma, sigma=self.sigma,
                              prior=self.prior, scale=self.scale, backend=self.backend, **batch)

    def extra_repr(self) -> str:
        h, d = self.summary_query.shape
        return (f"num_kv_heads={h}, head_dim={d}, chunk_size={self.chunk_size}, alpha={self.alpha}, "
                f"gamma={self.gamma}, sigma={self.sigma}, prior='{self.prior}', layout='{self.layout}'")
