"""A float64 NumPy reference of DashAttention, written from docs/semantics.md (never from a backend).

One sequence at a time: q [n_q, h_q, d], k and v [n_k, h_kv, d], bottom-right causal alignment. The entmax
threshold comes from the sort-based exact algorithm (closed form per support size for alpha 1.5 and 2,
bisection to 1e-15 otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TIE_TOL = 1e-5  # |x_c - tau| below this (relative to max(1, |tau|)) is a tie the contract lets backends decide


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Rounds float values to f32, f16 or bf16 precision (round to nearest even), returned as float64."""
    x32 = np.asarray(x, dtype=np.float32)
    if dtype == "f32":
        return x32.astype(np.float64)
    if dtype == "f16":
        return x32.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        bits = x32.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return (rounded.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise ValueError(dtype)


def entmax_threshold(x: np.ndarray, alpha: float) -> float:
    """tau with sum_c [x_c - tau]_+^(1/(alpha-1)) = 1, x already multiplied by (alpha - 1)."""
    xs = np.sort(np.asarray(x, dtype=np.float64))[::-1]
    n = xs.size
    if alpha == 2.0:
        csum = np.cumsum(xs)
        for k in range(n, 0, -1):
            tau = (csum[k - 1] - 1.0) / k
            if xs[k - 1] > tau:
                return float(tau)
    elif alpha == 1.5:
        s1 = np.cumsum(xs)
        s2 = np.cumsum(xs * xs)
        for k in range(n, 0, -1):
            mean = s1[k - 1] / k
            ss = s2[k - 1] / k - mean * mean
            delta = (1.0 - k * ss) / k
            if delta < 0:
                continue
            tau = mean - math.sqrt(delta)
            if xs[k - 1] > tau:
                return float(tau)
    p = 1.0 / (alpha - 1.0)
    lo, hi = xs[0] - 1.0, xs[0]
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        f = np.sum(np.clip(xs - mid, 0.0, None) ** p) - 1.0
        if f > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return float(0.5 * (lo + hi))


def entmax(z: np.ndarray, alpha: float) -> tuple:
    x = (alpha - 1.0) * np.asarray(z, dtype=np.float64)
    tau = entmax_threshold(x, alpha)
    w = np.clip(x - tau, 0.0, None) ** (1.0 / (alpha - 1.0))
    return w, tau, x


@dataclass
class SequenceResult:
    o: np.ndarray  # [n_q, h_q, d]
    lse: np.ndarray  # [h_q, n_q]
    mask: np.ndarray  # bool [h_kv, n_q, chunks_total], diagonal included
    tau: np.ndarray  # [h_q, n_q] (NaN where no routable chunk)
    mu: np.ndarray  # [h_kv, n_q]
    active: np.ndarray  # int [h_kv, n_q]: routed + 1
    summaries: np.ndarray  # [complete_chunks, h_kv, d]
    ambiguous: np.ndarray  # bool [n_q]: some head has a chunk within TIE_TOL of its threshold


def summaries_of(k: np.ndarray, summary_query, chunk: int, key_dtype: str) -> np.ndarray:
    n_k, h_kv, d = k.shape
    n_chunks = n_k // chunk
    sq = np.zeros((h_kv, d)) if summary_query is None else np.asarray(summary_query, dtype=np.float64)
    out = np.zeros((n_chunks, h_kv, d))
    for c in range(n_chunks):
        kc = k[c * chunk:(c + 1) * chunk]  # [C, h_kv, d]
        logits = np.einsum("thd,hd->ht", kc, sq) / math.sqrt(d)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[c] = np.einsum("ht,thd->hd", p, kc)
    return round_to(out, key_dtype)


def _sequence_inputs(q, k, v, scale):
    """q [n_q, h_q, d], k and v [n_k, h_kv, d] in float64, their sizes, and the softmax scale (1/sqrt(d) by default)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_q, h_q, d = q.shape
    n_k, h_kv, _ = k.shape
    return q, k, v, n_q, n_k, h_q, h_kv, d, (1.0 / math.sqrt(d) if scale is None else scale)


def forward_sequence(q, k, v, summary_query=None, *, chunk=64, alpha=1.5, gamma=1.0, sigma=1e8,
                     prior="estimate_diagonal", scale=None, key_dtype="f32") -> SequenceResult:
    q, k, v, n_q, n_k, h_q, h_kv, d, scale = _sequence_inputs(q, k, v, scale)
    g = h_q // h_kv
    summ = summaries_of(k, summary_query, chunk, key_dtype)
    chunks_total = (n_k + chunk - 1) // chunk
    res = SequenceResult(o=np.zeros((n_q, h_q, d)), lse=np.zeros((h_q, n_q)),
                         mask=np.zeros((h_kv, n_q, chunks_total), dtype=bool), tau=np.full((h_q, n_q), np.nan),
                         mu=np.zeros((h_kv, n_q)), active=np.zeros((h_kv, n_q), dtype=np.int64), summaries=summ,
                         ambiguous=np.zeros(n_q, dtype=bool))
    for i in range(n_q):
        p = n_k - n_q + i
        ci = p // chunk
        diag = np.arange(ci * chunk, p + 1)
        for r in range(h_kv):
            heads = range(r * g, (r + 1) * g)
            w = np.zeros(ci)
            if ci > 0:
                for h in heads:
                    z = gamma * (summ[:ci, r, :] @ q[i, h, :]) / math.sqrt(d)
                    wh, tau, x = entmax(z, alpha)
                    res.tau[h, i] = tau
                    if np.any(np.abs(x - tau) <= TIE_TOL * max(1.0, abs(tau))):
                        res.ambiguous[i] = True
                    w += wh
                w /= g
            routed = np.nonzero(w > 0)[0]
            logw = np.log(w[routed]) if routed.size else np.zeros(0)
            mu = float(logw.mean()) if routed.size else 0.0
            res.mu[r, i] = mu
            res.active[r, i] = routed.size + 1
            res.mask[r, i, routed] = True
            res.mask[r, i, ci] = True
            if prior == "estimate_diagonal":
                bias_chunks = (logw - mu) / sigma
            elif prior == "raw":
                bias_chunks = logw
            else:
                bias_chunks = np.zeros(routed.size)
            keys = np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in routed] + [diag])
            bias = np.concatenate([np.full(chunk, b) for b in bias_chunks] + [np.zeros(diag.size)])
            for h in heads:
                s = scale * (k[keys, r, :] @ q[i, h, :]) + bias
                m = s.max()
                e = np.exp(s - m)
                res.o[i, h] = (e @ v[keys, r, :]) / e.sum()
                res.lse[h, i] = m + math.log(e.sum())
    return res


def dense_sequence(q, k, v, scale=None) -> tuple:
    """Dense causal attention (bottom-right): o [n_q, h_q, d], lse [h_q, n_q]."""
    q, k, v, n_q, n_k, h_q, h_kv, d, scale = _sequence_inputs(q, k, v, scale)
    g = h_q // h_kv
    o = np.zeros((n_q, h_q, d))
    lse = np.zeros((h_q, n_q))
    for h in range(h_q):
        s = scale * q[:, h, :] @ k[:, h // g, :].T
        pos = n_k - n_q + np.arange(n_q)
        s[np.arange(n_k)[None, :] > pos[:, None]] = -np.inf
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        o[:, h] = (e @ v[:, h // g, :]) / e.sum(axis=1, keepdims=True)
        lse[h] = (m[:, 0] + np.log(e.sum(axis=1)))
    return o, lse


def unpack_mask(words: np.ndarray, chunks_total: int) -> np.ndarray:
    """uint32 [..., words] bit-packed mask -> bool [..., chunks_total]."""
    words = np.asarray(words, dtype=np.uint32)
    c = np.arange(chunks_total)
    return ((words[..., c // 32] >> (c % 32).astype(np.uint32)) & 1).astype(bool)


def structured_problem(rng, b, n_q, n_k, h_q, h_kv, d, chunk, spread=3.0, dtype=np.float32):
    """q, k, v with per-chunk key offsets, so chunk summaries differ and routing is genuinely sparse."""
    n_chunks = (n_k + chunk - 1) // chunk
    centers = rng.standard_normal((b, n_chunks, h_kv, d)) * spread
    k = rng.standard_normal((b, n_k, h_kv, d)) + np.repeat(centers, chunk, axis=1)[:, :n_k]
    v = rng.standard_normal((b, n_k, h_kv, d))
    q = rng.standard_normal((b, n_q, h_q, d)) * 1.5
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)
