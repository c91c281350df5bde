"""The array API: forward, summarize, route, attend, dense_attention over any DLPack-capable arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _core
from ._arrays import Frame, dtype_of, for_core, frame_of, host_numpy, is_torch
from .errors import InvalidArgumentError

__all__ = ["forward", "summarize", "route", "attend", "dense_attention", "Routing", "method"]

_LAYOUTS = ("bnhd", "bhnd")


def method(chunk_size: int = 64, alpha: float = 1.5, gamma: float = 1.0, sigma: float = 1e8,
           prior: str = "estimate_diagonal", scale: Optional[float] = None, solver: str = "exact") -> "_core.Method":
    """The method parameters as the extension's Method object (validated when a call uses it)."""
    if isinstance(chunk_size, bool) or int(chunk_size) != chunk_size:
        raise InvalidArgumentError(f"invalid argument 'chunk_size': expected an integer, got {chunk_size!r}")
    m = _core.Method(chunk_size=int(chunk_size), alpha=float(alpha), gamma=float(gamma), sigma=float(sigma),
                     scale=0.0 if scale is None else float(scale), prior=str(prior), solver=str(solver))
    m.validate()
    return m


@dataclass
class _Geometry:
    """Logical sizes of one call, derived from the shapes (the extension re-validates everything)."""

    varlen: bool
    batch: int  # b, or num_seqs for varlen
    rows_q: int  # n_q (padded) or total_q (varlen)
    n_k: int  # padded key length, or max_seqlen_k
    h_q: int
    h_kv: int
    d: int

    def per_row(self, heads: int) -> tuple:
        return (heads, self.rows_q) if self.varlen else (self.batch, heads, self.rows_q)

    def mask_shape(self, chunk: int) -> tuple:
        words = max(1, ((self.n_k + chunk - 1) // chunk + 31) // 32)
        return (self.h_kv, self.rows_q, words) if self.varlen else (self.batch, self.h_kv, self.rows_q, words)

    def summaries_shape(self, chunk: int) -> tuple:
        # At least one row so the buffer has an address even when no chunk is complete yet.
        return (self.batch, max(1, self.n_k // chunk), self.h_kv, self.d)


def _dims(x: Any, name: str, layout: str, varlen: bool) -> tuple:
    """(rows, heads, d) of an attention tensor in the given layout, plus b for padded tensors."""
    shape = tuple(int(s) for s in x.shape)
    if varlen and len(shape) == 3:
        rows, heads, d = (shape[1], shape[0], shape[2]) if layout == "bhnd" else shape
        return 1, rows, heads, d
    if len(shape) != 4:
        want = "rank 3 [total, h, d] or rank 4 (packed varlen)" if varlen else "rank 4"
        raise InvalidArgumentError(f"invalid argument '{name}': expected {want} in layout '{layout}', got shape "
                                   f"{list(shape)}")
    if layout == "bhnd":
        b, heads, rows, d = shape
    else:
        b, rows, heads, d = shape
    return b, rows, heads, d


def _check_layout(layout: str) -> str:
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(f"invalid argument 'layout': expected 'bnhd' ([b, n, h, d]) or 'bhnd' "
                                   f"([b, h, n, d]), got {layout!r}")
    return layout


def _page_size(k: Any, layout: str) -> int:
    """Rows per page of a page pool [pages, page_size, h_kv, d] ([pages, h_kv, page_size, d] in layout 'bhnd')."""
    if len(k.shape) != 4:
        raise InvalidArgumentError(f"invalid argument 'k': expected a rank-4 page pool with block_table, got shape "
                                   f"{[int(x) for x in k.shape]}")
    return int(k.shape[2] if layout == "bhnd" else k.shape[1])


class _Call:
    """Argument preparation shared by the entry points: frame, batch layout, geometry, stream.

    With a block table, k is a page pool: the padded key length is max_seqlen_k (by default the table's width
    times the page size, all of the cache as FlashAttention's kvcache reads it) and the batch is q's, or the
    table's rows when k is also the first tensor (Stage 0 has no queries).
    """

    def __init__(self, q: Any, k: Any, *, layout: str, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 seqlens_q, seqlens_k, stream, q_name: str = "q", k_is_summaries: bool = False, n_k: int = 0,
                 block_table=None):
        self.layout = _check_layout(layout)
        self.frame: Frame = frame_of(q, q_name)
        self.varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        f = self.frame
        self.block_table = f.to_device_int32(block_table, "block_table")
        self.paged = self.block_table is not None
        if self.paged and max_seqlen_k is None and len(self.block_table.shape) == 2:
            max_seqlen_k = int(self.block_table.shape[1]) * _page_size(k, self.layout)
        cu_q = f.to_device_int32(cu_seqlens_q, "cu_seqlens_q")
        cu_k = f.to_device_int32(cu_seqlens_k, "cu_seqlens_k")
        if self.varlen:
            if cu_q is None or cu_k is None:
                missing = "cu_seqlens_k" if cu_k is None else "cu_seqlens_q"
                raise InvalidArgumentError(f"invalid argument '{missing}': expected an int32 array of num_seqs + 1 "
                                           f"prefix sums (cu_seqlens_q and cu_seqlens_k go together), got None")
            # The launch grid is sized on the host: read the longest sequence when the caller did not say.
            if max_seqlen_q is None:
                max_seqlen_q = int(np.diff(host_numpy(cu_q)).max(initial=0))
            if max_seqlen_k is None:
                max_seqlen_k = int(np.diff(host_numpy(cu_k)).max(initial=0))
        self.cu_q, self.cu_k = cu_q, cu_k
        self.max_q = int(max_seqlen_q or 0)
        self.max_k = int(max_seqlen_k or 0)
        self.seqlens_q = f.to_device_int32(seqlens_q, "seqlens_q")
        self.seqlens_k = f.to_device_int32(seqlens_k, "seqlens_k")
        self.batch = _core.Batch(cu_seqlens_q=self.cu_q, cu_seqlens_k=self.cu_k, max_seqlen_q=self.max_q,
                                 max_seqlen_k=self.max_k, seqlens_q=self.seqlens_q, seqlens_k=self.seqlens_k,
                                 block_table=self.block_table)
        b, rows_q, h_q, d = _dims(q, q_name, self.layout, self.varlen)
        if k_is_summaries:
            h_kv = int(k.shape[2]) if len(k.shape) == 4 else 1
            keys = n_k
        else:
            _, keys, h_kv, _ = _dims(k, "k", self.layout, self.varlen)
        if self.paged:
            keys = self.max_k
            if q is k and len(self.block_table.shape) == 2:
                b = int(self.block_table.shape[0])
        if self.varlen:
            num_seqs = int(cu_q.shape[0]) - 1
            self.geom = _Geometry(True, max(num_seqs, 1), rows_q, self.max_k, h_q, max(h_kv, 1), d)
        else:
            self.geom = _Geometry(False, b, rows_q, keys, h_q, max(h_kv, 1), d)
        self.stream_value = stream

    def stream(self) -> int:
        return self.frame.stream(self.stream_value)

    def empty(self, shape, dtype: str):
        return self.frame.empty(shape, dtype)


@dataclass
class Routing:
    """Stage-1 results: the bit-packed mask and the numbers the prior bias is rebuilt from.

    mask: uint32 [b, h_kv, n_q, words] (packed varlen: [h_kv, total_q, words]); bit c%32 of word c/32 is set
    for each attended chunk c, the diagonal chunk included. tau: float32 [b, h_q, n_q], the entmax threshold of
    each query head; mu: float32 [b, h_kv, n_q], mean log w over the routed chunks; active_chunks: int32
    [b, h_kv, n_q], routed chunks + 1 (the diagonal); summaries: the chunk summaries routing used (key dtype,
    [b, max_chunks, h_kv, d]).
    """

    mask: Any
    tau: Any
    mu: Any
    active_chunks: Any
    summaries: Any = None
    chunk_size: int = 64
    n_q: int = 0
    n_k: int = 0
    cu_seqlens_q: Any = None
    cu_seqlens_k: Any = None
    seqlens_q: Any = None
    seqlens_k: Any = None
    _stats: Optional[dict] = field(default=None, repr=False)

    def stats(self) -> dict:
        """Sparsity (1 - attended / causally visible keys) and active chunks, per KV head and overall.

        Reads active_chunks on the host (a device-to-host copy for GPU arrays).
        """
        if self._stats is None:
            batch = _core.Batch(cu_seqlens_q=_host_i32(self.cu_seqlens_q), cu_seqlens_k=_host_i32(self.cu_seqlens_k),
                                max_seqlen_q=self.n_q, max_seqlen_k=self.n_k,
                                seqlens_q=_host_i32(self.seqlens_q), seqlens_k=_host_i32(self.seqlens_k))
            active = np.ascontiguousarray(host_numpy(self.active_chunks))
            self._stats = _core.routing_stats(active, batch=batch, n_q=self.n_q, n_k=self.n_k, chunk=self.chunk_size)
        return self._stats

    @property
    def sparsity(self) -> float:
        return float(self.stats()["sparsity"])


def _host_i32(x):
    return None if x is None else np.ascontiguousarray(host_numpy(x), dtype=np.int32)


def _routing_buffers(call: _Call, m, active: bool = True) -> dict:
    g = call.geom
    return {
        "mask": call.empty(g.mask_shape(m.chunk_size), "u32"),
        "tau": call.empty(g.per_row(g.h_q), "f32"),
        "mu": call.empty(g.per_row(g.h_kv), "f32"),
        "active_chunks": call.empty(g.per_row(g.h_kv), "i32") if active else None,
    }


def _make_routing(call: _Call, m, bufs: dict, summaries=None) -> Routing:
    f = call.frame
    g = call.geom
    return Routing(mask=f.wrap(bufs["mask"]), tau=f.wrap(bufs["tau"]), mu=f.wrap(bufs["mu"]),
                   active_chunks=f.wrap(bufs["active_chunks"]), summaries=f.wrap(summaries),
                   chunk_size=m.chunk_size, n_q=call.max_q if call.varlen else g.rows_q, n_k=g.n_k,
                   cu_seqlens_q=call.cu_q, cu_seqlens_k=call.cu_k, seqlens_q=call.seqlens_q,
                   seqlens_k=call.seqlens_k)


def _torch_device_guard(frame: Frame):
    """Makes the tensor's GPU current for the duration of a call (backends launch on the current device)."""
    if frame.kind == "torch" and frame.device == "cuda":
        import torch

        return torch.cuda.device(frame.like.device)
    import contextlib

    return contextlib.nullcontext()


def _needs_autograd(*xs) -> bool:
    if not any(is_torch(x) for x in xs if x is not None):
        return False
    import torch

    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in xs)


def forward(q, k, v, summary_query=None, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
            max_seqlen_k=None, seqlens_q=None, seqlens_k=None, block_table=None, layout: str = "bnhd",
            chunk_size: int = 64,
            alpha: float = 1.5, gamma: float = 1.0, sigma: float = 1e8, prior: str = "estimate_diagonal",
            scale: Optional[float] = None, solver: str = "exact", return_lse: bool = False,
            return_routing: bool = False, backend: str = "auto", out=None, out_dtype=None, stream=None):
    """DashAttention forward (Stage 0 + 1 + 2): prefill, decode (n_q < n_k, bottom-right causal) or varlen.

    q [b, n_q, h_q, d], k and v [b, n_k, h_kv, d] (layout="bnhd") or [b, h, n, d] (layout="bhnd"), any strides
    with a contiguous last axis; packed varlen batches pass [total, h, d] tensors with cu_seqlens_q/k (int32
    prefix sums). Returns o (same shape/layout and dtype as q unless out_dtype="f32"), plus lse (float32
    [b, h_q, n_q], packed: [h_q, total_q]) if return_lse and a Routing if return_routing, as a tuple in that
    order. GPU arrays run on the GPU backend on the caller's current stream (torch / CuPy) or `stream`.

    Paged K/V (FlashAttention's kvcache convention, padded or packed batches): k and v are page pools
    [num_pages, page_size, h_kv, d] and block_table (int32 [b, max_pages], on q's device) lists each sequence's
    pages in order; page_size must be a multiple of 64 and of chunk_size. seqlens_k (FlashAttention's
    cache_seqlens) gives each sequence's key count; max_seqlen_k, the padded key length, defaults to
    max_pages * page_size.
    """
    if _needs_autograd(q, k, v, summary_query) and out is None and not return_routing:
        from . import torch as _dtorch

        o, lse = _dtorch._forward_with_autograd(
            q, k, v, summary_query, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
            block_table=block_table, layout=layout, chunk_size=chunk_size, alpha=alpha, gamma=gamma, sigma=sigma,
            prior=prior, scale=scale, solver=solver, backend=backend)
        return (o, lse) if return_lse else o
    m = method(chunk_size, alpha, gamma, sigma, prior, scale, solver)
    call = _Call(q, k, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                 stream=stream, block_table=block_table)
    g = call.geom
    o_dtype = dtype_of(q) if out_dtype is None else _arrays_dtype(out_dtype)
    o_raw = call.empty(tuple(q.shape), o_dtype) if out is None else out
    lse_raw = call.empty(g.per_row(g.h_q), "f32") if return_lse else None
    bufs = _routing_buffers(call, m) if return_routing else {"mask": None, "tau": None, "mu": None,
                                                             "active_chunks": None}
    summaries_raw = call.empty(g.summaries_shape(m.chunk_size), dtype_of(k)) if return_routing else None
    _run_forward(call, m, q, k, v, o_raw, summary_query, lse_raw, bufs, summaries_raw, backend)
    f = call.frame
    result = [o_raw if out is not None else f.wrap(o_raw)]
    if return_lse:
        result.append(f.wrap(lse_raw))
    if return_routing:
        result.append(_make_routing(call, m, bufs, summaries_raw))
    return result[0] if len(result) == 1 else tuple(result)


def _arrays_dtype(d) -> str:
    from ._arrays import dtype_name

    return dtype_name(d)


def _run_forward(call: _Call, m, q, k, v, o, summary_query, lse, bufs, summaries, backend, summaries_valid=0,
                 o_layout_view=None):
    qc, bf = for_core(q)
    kc, _ = for_core(k)
    vc, _ = for_core(v)
    oc, _ = for_core(o)
    sqc, bf_sq = for_core(summary_query)
    sc, _ = for_core(summaries)
    with _torch_device_guard(call.frame):
        return _core.forward(qc, kc, vc, oc, summary_query=sqc, lse=lse, mask=bufs["mask"], tau=bufs["tau"],
                             mu=bufs["mu"], active_chunks=bufs["active_chunks"], summaries=sc,
                             summaries_valid=summaries_valid, batch=call.batch, method=m, layout=call.layout,
                             backend=backend, stream=call.stream(), u16_is_bf16=bf or bf_sq,
                             workspace_alloc=_workspace_allocator(call.frame))


def _workspace_allocator(frame):
    """forward()'s workspace from the caller's framework: torch's caching allocator (or NumPy) hands out the bytes
    and takes them back in stream order, so a call neither allocates device memory nor waits for its kernels before
    it returns. Other frameworks (None): the library allocates the workspace and frees it after the call's kernels."""
    if frame.kind in ("torch", "numpy"):
        return lambda nbytes: frame.empty((nbytes,), "u8")
    return None


def summarize(k, summary_query=None, *, cu_seqlens_k=None, max_seqlen_k=None, seqlens_k=None, block_table=None,
              layout: str = "bnhd", chunk_size: int = 64, backend: str = "auto", out=None, stream=None):
    """Stage 0: the summary of every complete chunk, [b, max_chunks, h_kv, d] in the key dtype.

    Packed varlen keys ([total, h_kv, d] with cu_seqlens_k) give [num_seqs, max_seqlen_k // C, h_kv, d]. A page
    pool k with block_table (as in forward) gives [block_table.shape[0], max_seqlen_k // C, h_kv, d]; seqlens_k
    limits each sequence to its own complete chunks (the rows past them are left as allocated).
    """
    m = method(chunk_size)
    varlen = cu_seqlens_k is not None
    call = _Call(k, k, layout=layout, cu_seqlens_q=cu_seqlens_k if varlen else None, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_k, max_seqlen_k=max_seqlen_k, seqlens_q=None, seqlens_k=seqlens_k,
                 stream=stream, q_name="k", block_table=block_table)
    g = call.geom
    n_chunks = g.n_k // m.chunk_size
    raw = call.empty(g.summaries_shape(m.chunk_size), dtype_of(k)) if out is None else out
    kc, bf = for_core(k)
    sqc, bf_sq = for_core(summary_query)
    sc, _ = for_core(raw)
    with _torch_device_guard(call.frame):
        _core.summarize(kc, sc, summary_query=sqc, first_chunk=0, batch=_summarize_batch(call), method=m,
                        layout=call.layout, backend=backend, stream=call.stream(), u16_is_bf16=bf or bf_sq)
    if out is not None:
        return out
    res = call.frame.wrap(raw)
    return res if n_chunks == res.shape[1] else res[:, :n_chunks]


def _summarize_batch(call: _Call):
    if not call.varlen:
        return _core.Batch(max_seqlen_k=call.max_k, seqlens_k=call.seqlens_k, block_table=call.block_table)
    return _core.Batch(cu_seqlens_q=call.cu_k, cu_seqlens_k=call.cu_k, max_seqlen_q=call.max_k,
                       max_seqlen_k=call.max_k, block_table=call.block_table)


def route(q, k=None, summary_query=None, *, summaries=None, n_k=None, cu_seqlens_q=None, cu_seqlens_k=None,
          max_seqlen_q=None, max_seqlen_k=None, seqlens_q=None, seqlens_k=None, block_table=None,
          layout: str = "bnhd",
          chunk_size: int = 64, alpha: float = 1.5, gamma: float = 1.0, sigma: float = 1e8,
          prior: str = "estimate_diagonal", scale: Optional[float] = None, solver: str = "exact",
          backend: str = "auto", stream=None) -> Routing:
    """Stage 0 + 1: routing only (mask, tau, mu, active chunks and, via .stats(), sparsity).

    Give the keys k (summaries are computed with summary_query; a page pool with block_table as in forward), or
    precomputed `summaries` [b, >= max_chunks, h_kv, d] together with n_k (padded batches) or cu_seqlens_k /
    max_seqlen_k (varlen).
    """
    m = method(chunk_size, alpha, gamma, sigma, prior, scale, solver)
    if summaries is None:
        if k is None:
            raise InvalidArgumentError("invalid argument 'k': expected the keys, or pass summaries= and n_k=, got None")
        paged = block_table is not None
        if paged and max_seqlen_k is None:
            max_seqlen_k = int(np.shape(block_table)[1]) * _page_size(k, layout)
        # A paged Stage 0 reads each sequence's pages only up to its length: pages past it may be unassigned.
        summaries = summarize(k, summary_query, cu_seqlens_k=cu_seqlens_k, max_seqlen_k=max_seqlen_k,
                              seqlens_k=seqlens_k if paged else None, block_table=block_table, layout=layout,
                              chunk_size=chunk_size, backend=backend, stream=stream)
        if n_k is None and cu_seqlens_k is None:
            n_k = max_seqlen_k if paged else int(k.shape[2] if layout == "bhnd" else k.shape[1])
    elif n_k is None and cu_seqlens_k is None:
        raise InvalidArgumentError("invalid argument 'n_k': expected the key length with precomputed summaries, "
                                   "got None")
    call = _Call(q, summaries, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                 stream=stream, k_is_summaries=True, n_k=int(n_k or 0))
    bufs = _routing_buffers(call, m)
    qc, bf = for_core(q)
    sc, bf_s = for_core(summaries)
    s_core = _at_least_one_chunk(call, sc, m)
    with _torch_device_guard(call.frame):
        _core.route(qc, s_core, bufs["mask"], bufs["tau"], bufs["mu"], active_chunks=bufs["active_chunks"],
                    n_k=int(n_k or 0), batch=call.batch, method=m, layout=call.layout, backend=backend,
                    stream=call.stream(), u16_is_bf16=bf or bf_s)
    return _make_routing(call, m, bufs, summaries)


def _at_least_one_chunk(call: _Call, summaries, m):
    """Summaries with zero chunks have no address; give the extension a one-row buffer that is never read."""
    if summaries is not None and int(summaries.shape[1]) == 0:
        g = call.geom
        return call.empty((int(summaries.shape[0]), 1, int(summaries.shape[2]), int(summaries.shape[3])),
                          dtype_of(summaries))
    return summaries


def attend(q, k, v, routing: Routing, *, summaries=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
           max_seqlen_k=None, seqlens_q=None, seqlens_k=None, block_table=None, layout: str = "bnhd",
           chunk_size: Optional[int] = None,
           alpha: float = 1.5, gamma: float = 1.0, sigma: float = 1e8, prior: str = "estimate_diagonal",
           scale: Optional[float] = None, solver: str = "exact", return_lse: bool = False, backend: str = "auto",
           out=None, stream=None):
    """Stage 2: sparse attention over the routed chunks plus the diagonal chunk, given a Routing from route().

    The method parameters must be those routing used (the chunk size defaults to routing.chunk_size); the
    batch layout defaults to the one recorded in the Routing. Paged k and v take block_table as in forward;
    max_seqlen_k then defaults to the key length routing used (routing.n_k).
    """
    chunk = routing.chunk_size if chunk_size is None else chunk_size
    m = method(chunk, alpha, gamma, sigma, prior, scale, solver)
    if cu_seqlens_q is None and cu_seqlens_k is None and seqlens_q is None and seqlens_k is None:
        cu_seqlens_q, cu_seqlens_k = routing.cu_seqlens_q, routing.cu_seqlens_k
        seqlens_q, seqlens_k = routing.seqlens_q, routing.seqlens_k
    if block_table is not None and max_seqlen_k is None:
        max_seqlen_k = routing.n_k
    call = _Call(q, k, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                 stream=stream, block_table=block_table)
    g = call.geom
    summaries = routing.summaries if summaries is None else summaries
    o_raw = call.empty(tuple(q.shape), dtype_of(q)) if out is None else out
    lse_raw = call.empty(g.per_row(g.h_q), "f32") if return_lse else None
    qc, bf = for_core(q)
    kc, _ = for_core(k)
    vc, _ = for_core(v)
    oc, _ = for_core(o_raw)
    sc, _ = for_core(_at_least_one_chunk(call, summaries, m) if prior != "none" else summaries)
    with _torch_device_guard(call.frame):
        _core.attend(qc, kc, vc, oc, routing.mask, summaries=sc, tau=routing.tau, mu=routing.mu, lse=lse_raw,
                     batch=call.batch, method=m, layout=call.layout, backend=backend, stream=call.stream(),
                     u16_is_bf16=bf)
    o = o_raw if out is not None else call.frame.wrap(o_raw)
    return (o, call.frame.wrap(lse_raw)) if return_lse else o


def dense_attention(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                    seqlens_q=None, seqlens_k=None, layout: str = "bnhd", scale: Optional[float] = None,
                    return_lse: bool = False, backend: str = "auto", out=None, stream=None):
    """Dense causal attention (bottom-right aligned) through the same backends: the baseline DashAttention
    approaches as every chunk gets routed and the prior vanishes."""
    call = _Call(q, k, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                 stream=stream)
    g = call.geom
    o_raw = call.empty(tuple(q.shape), dtype_of(q)) if out is None else out
    lse_raw = call.empty(g.per_row(g.h_q), "f32") if return_lse else None
    qc, bf = for_core(q)
    kc, _ = for_core(k)
    vc, _ = for_core(v)
    oc, _ = for_core(o_raw)
    with _torch_device_guard(call.frame):
        _core.dense_attention(qc, kc, vc, oc, lse=lse_raw, batch=call.batch,
                              scale=0.0 if scale is None else float(scale), layout=call.layout, backend=backend,
                              stream=call.stream(), u16_is_bf16=bf)
    o = o_raw if out is not None else call.frame.wrap(o_raw)
    return (o, call.frame.wrap(lse_raw)) if return_lse else o


def resolve_backend(name: str, device: str) -> str:
    """The backend `name` ('auto', 'cpu', 'cuda') resolves to for arrays on `device`, or a reason it cannot."""
    if name not in ("", "auto"):
        return name
    for b in sorted(_core.backends(), key=lambda b: -b["priority"]):
        if b["device"] == device and b["available"]:
            return b["name"]
    return f"<none for {device}>"
