"""Decoder: cached decoding that owns the growing K/V and chunk-summary caches."""

from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from . import _core
from ._api import _Geometry, _make_routing, _torch_device_guard, method
from ._arrays import dtype_name, for_core, frame_of, is_torch
from .errors import InvalidArgumentError

__all__ = ["Decoder"]


def _parse_device(device: Any) -> tuple:
    if is_torch(device) or type(device).__name__ == "device":  # torch.device
        return device.type, device.index or 0
    text = str(device)
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda", "hip"):
        raise InvalidArgumentError(f"invalid argument 'device': expected 'cpu', 'cuda[:i]' or 'hip[:i]', got {text!r}")
    return kind, int(index) if index else 0


class Decoder:
    """Cached DashAttention decoding for a padded batch of `batch` sequences.

    Each step appends t new tokens per sequence (their keys and values go into the cache), summarizes exactly
    the chunks those keys complete (a summary is computed once and reused), routes the new queries over the
    summaries and attends. Outputs equal the corresponding rows of a prefill forward() over the whole sequence.
    With step(..., new_tokens=[...]) sequence i appends only its first new_tokens[i] rows (prompts of different
    lengths, sequences that pause); its later rows are padding. `lengths` gives each sequence's length.

    Arrays passed to step() must live on `device` and have the decoder's dtype; outputs are allocated in the
    framework of q. Keys and values of one step must be dense per sequence ([b, t, h_kv, d] with strides
    [*, h_kv*d, d, 1]; any layout works for t = 1).

    With page_size > 0 (a multiple of 64 and of chunk_size) the K/V cache is paged: a K and a V pool
    [num_pages, page_size, h_kv, d] (key_pages(), value_pages()) and an int32 block table [batch, width]
    (block_table()); key j of sequence i is row j % page_size of page block_table[i, j // page_size]. The outputs
    are bit for bit those of a contiguous decoder.

    Continuous batching: reset(i) ends sequence i so that a later step with new_tokens starts a new prompt in its
    slot, and fork(src, dst) makes sequence dst a copy of sequence src (parallel sampling, beam search); a paged
    decoder shares src's full pages with dst instead of copying them, and reuses freed pages before it grows.
    """

    def __init__(self, batch: int, h_q: int, h_kv: int, d: int, *, dtype: Any = "bf16", device: Any = "cpu",
                 summary_query: Any = None, chunk_size: int = 64, alpha: float = 1.5, gamma: float = 1.0,
                 sigma: float = 1e8, prior: str = "estimate_diagonal", scale: Optional[float] = None,
                 solver: str = "exact", backend: str = "auto", initial_capacity: int = 4096, page_size: int = 0):
        self.method = method(chunk_size, alpha, gamma, sigma, prior, scale, solver)
        kind, index = _parse_device(device)
        self._summary_query = summary_query  # the extension reads it on every step: keep it alive
        sq, bf = for_core(summary_query)
        self._batch, self._h_q, self._h_kv, self._d = int(batch), int(h_q), int(h_kv), int(d)
        self._core = _core.Decoder(self._batch, self._h_q, self._h_kv, self._d, dtype_name(dtype), self.method,
                                   device=kind, device_id=index, backend=backend, summary_query=sq,
                                   initial_capacity=int(initial_capacity), page_size=int(page_size),
                                   u16_is_bf16=bf)

    @property
    def length(self) -> int:
        """The longest sequence's length (every sequence's while no step passed new_tokens)."""
        return self._core.length

    @property
    def lengths(self) -> list:
        """Each sequence's length in the cache."""
        return list(self._core.lengths)

    @property
    def summarized_chunks(self) -> int:
        """Complete chunks of the shortest sequence: the summaries trusted for every sequence."""
        return self._core.summarized_chunks

    @property
    def capacity(self) -> int:
        return self._core.capacity

    @property
    def backend(self) -> str:
        return self._core.backend

    @property
    def page_size(self) -> int:
        """Keys per page of a paged decoder; 0 for contiguous caches."""
        return self._core.page_size

    @property
    def num_pages(self) -> int:
        """Pages allocated in each of the K and V pools (0 for contiguous caches)."""
        return self._core.num_pages

    @property
    def free_pages(self) -> int:
        """Pages of a paged decoder that no sequence holds (reused before the pools grow); 0 for contiguous caches."""
        return self._core.free_pages

    def reset(self, seq: int) -> None:
        """Ends sequence `seq`: its length becomes 0, and a later step(..., new_tokens=...) starts a new prompt in its
        slot while the other sequences go on. A paged decoder returns the sequence's pages to its pool (pages that a
        fork shares stay with it). Runs on the stream of the last step."""
        self._core.reset(int(seq))

    def fork(self, src: int, dst: int) -> None:
        """Makes sequence `dst` a copy of sequence `src` (its keys, values and summaries; dst's own are dropped), so
        that both continue from src's tokens: the same tokens then give the same outputs. A paged decoder shares
        src's full pages and copies only a partly filled last page. Runs on the stream of the last step."""
        self._core.fork(int(src), int(dst))

    def step(self, q, k, v, *, new_tokens=None, layout: str = "bnhd", return_lse: bool = False,
             return_routing: bool = False, out=None, stream=None):
        """Appends k, v ([b, t, h_kv, d]) and returns the attention output of q ([b, t, h_q, d]).

        new_tokens (optional): a list or array of `batch` counts in [0, t]; sequence i appends k[i, :new_tokens[i]]
        and v[i, :new_tokens[i]] at its own length and attends q[i, :new_tokens[i]]; its rows past the count are
        padding (o = 0, lse = -inf). None: t for every sequence.
        Returns o, or a tuple with lse (float32 [b, h_q, t]) and/or a Routing for the t new queries; the mask spans
        the step's padded key length (the longest sequence after the step, at least t).
        """
        frame = frame_of(q)
        shape = tuple(int(s) for s in q.shape)
        if len(shape) != 4:
            raise InvalidArgumentError(f"invalid argument 'q': expected rank 4, got shape {list(shape)}")
        t = shape[2] if layout == "bhnd" else shape[1]
        counts = None if new_tokens is None else [int(c) for c in np.asarray(new_tokens).reshape(-1)]
        ends = [n + (t if counts is None else c) for n, c in zip(self.lengths, counts or [t] * self._batch)]
        n_k = max([t] + ends)  # the padded key length of the step, as the core library computes it
        geom = _Geometry(False, self._batch, t, n_k, self._h_q, self._h_kv, self._d)
        o_raw = frame.empty(shape, dtype_name(q.dtype)) if out is None else out
        lse_raw = frame.empty(geom.per_row(self._h_q), "f32") if return_lse else None
        bufs = {"mask": None, "tau": None, "mu": None, "active_chunks": None}
        if return_routing:
            bufs = {"mask": frame.empty(geom.mask_shape(self.method.chunk_size), "u32"),
                    "tau": frame.empty(geom.per_row(self._h_q), "f32"),
                    "mu": frame.empty(geom.per_row(self._h_kv), "f32"),
                    "active_chunks": frame.empty(geom.per_row(self._h_kv), "i32")}
        qc, _ = for_core(q)
        kc, _ = for_core(k)
        vc, _ = for_core(v)
        oc, _ = for_core(o_raw)
        with _torch_device_guard(frame):
            self._core.step(qc, kc, vc, oc, lse=lse_raw, mask=bufs["mask"], tau=bufs["tau"], mu=bufs["mu"],
                            active_chunks=bufs["active_chunks"], layout=layout, stream=frame.stream(stream),
                            new_tokens=counts)
        result = [o_raw if out is not None else frame.wrap(o_raw)]
        if return_lse:
            result.append(frame.wrap(lse_raw))
        if return_routing:
            ragged = counts is not None or len(set(ends)) > 1
            seqlens = (np.array(counts or [t] * self._batch, np.int32), np.array(ends, np.int32)) if ragged else None
            routing = _make_routing(_StepCall(frame, geom, seqlens), self.method, bufs)
            routing.n_q, routing.n_k = t, n_k
            result.append(routing)
        return result[0] if len(result) == 1 else tuple(result)

    def keys(self, copy: bool = True):
        """The key cache [b, length, h_kv, d] (a copy by default: a view is invalidated when the cache grows).

        A paged decoder's keys are gathered from its pages into a new array (copy=False raises)."""
        if self.page_size:
            return self._gather("keys", "key_pages", copy)
        return self._cache(self._core.keys(), copy)

    def values(self, copy: bool = True):
        """The value cache [b, length, h_kv, d]; gathered from the pages of a paged decoder, like keys()."""
        if self.page_size:
            return self._gather("values", "value_pages", copy)
        return self._cache(self._core.values(), copy)

    def key_pages(self, copy: bool = True):
        """The K page pool [num_pages, page_size, h_kv, d] of a paged decoder (a copy by default)."""
        return self._cache(self._core.key_pages(), copy)

    def value_pages(self, copy: bool = True):
        """The V page pool [num_pages, page_size, h_kv, d] of a paged decoder (a copy by default)."""
        return self._cache(self._core.value_pages(), copy)

    def block_table(self, copy: bool = True):
        """The int32 block table [batch, width] of a paged decoder; entries past a sequence's pages are unused."""
        return self._cache(self._core.block_table(), copy)

    def summaries(self, copy: bool = True):
        """The chunk summaries [b, summarized_chunks, h_kv, d] in the cache's dtype."""
        return self._cache(self._core.summaries(), copy)

    def _gather(self, name: str, pool: str, copy: bool):
        # The rows of a paged cache are spread over its pool: a contiguous [b, length, h_kv, d] array is a copy.
        if not copy:
            raise InvalidArgumentError(
                f"invalid argument 'copy': expected True for {name}() of a paged decoder (its {name} are gathered "
                f"from the pages into a new array; read {pool}() through block_table() for views), got False")
        pages, table = getattr(self, pool)(copy=False), self.block_table(copy=False)
        size = self.page_size
        used = -(-self.length // size)  # table columns that hold keys
        index = table[:, :used]
        if is_torch(index):
            index = index.long()
        rows = pages[index]  # [b, used, page_size, h_kv, d]
        rows = rows.reshape(self._batch, used * size, self._h_kv, self._d)[:, :self.length]
        return rows.contiguous() if is_torch(rows) else np.ascontiguousarray(rows)

    def _cache(self, raw, copy: bool):
        # torch reads every dtype and device through DLPack; NumPy only host arrays without bfloat16.
        torch = sys.modules.get("torch")
        if torch is not None:
            arr = torch.from_dlpack(raw)
            return arr.clone() if copy else arr
        if self._core.backend != "cpu" or self._core.dtype == "bf16":
            raise TypeError("reading a GPU or bfloat16 cache needs torch: import torch first")
        arr = np.from_dlpack(raw)
        return arr.copy() if copy else arr


class _StepCall:
    """The few attributes _make_routing reads, for a decode step (a padded batch; seqlens: the host seqlens_q and
    seqlens_k of a step whose sequences differ in length, else None)."""

    def __init__(self, frame, geom, seqlens=None):
        self.frame, self.geom = frame, geom
        self.varlen = False
        self.max_q = geom.rows_q
        self.cu_q = self.cu_k = None
        self.seqlens_q, self.seqlens_k = seqlens if seqlens is not None else (None, None)
