"""Packed varlen and padded batches: each sequence gives what it gives alone."""

import numpy as np
import pytest

import dashattn
import reference as R

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)


def _sequences(rng, lengths_q, lengths_k, h_q=4, h_kv=2, d=64):
    seqs = []
    for nq, nk in zip(lengths_q, lengths_k):
        q, k, v = R.structured_problem(rng, 1, nk, nk, h_q, h_kv, d, 16)
        seqs.append((np.ascontiguousarray(q[0, nk - nq:]), k[0], v[0]))
    return seqs


@pytest.mark.parametrize("decode", [False, True])
def test_packed_varlen_equals_per_sequence(rng, decode):
    lengths_k = [37, 100, 16, 64, 1]
    lengths_q = [3, 1, 16, 2, 1] if decode else lengths_k
    seqs = _sequences(rng, lengths_q, lengths_k)
    q = np.concatenate([s[0] for s in seqs])
    k = np.concatenate([s[1] for s in seqs])
    v = np.concatenate([s[2] for s in seqs])
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    o, lse, routing = dashattn.forward(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                                       return_routing=True, **METHOD)
    assert o.shape == q.shape and lse.shape == (4, q.shape[0])
    assert routing.mask.shape[:2] == (2, q.shape[0])
    for i, (qs, ks, vs) in enumerate(seqs):
        rows = slice(cu_q[i], cu_q[i + 1])
        alone, alone_lse = dashattn.forward(qs[None], ks[None], vs[None], return_lse=True, **METHOD)
        np.testing.assert_allclose(o[rows], alone[0], atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(lse[:, rows], alone_lse[0], atol=1e-6, rtol=1e-6)
        ref = R.forward_sequence(qs, ks, vs, chunk=16, gamma=2.0, sigma=5.0)
        ok = ~ref.ambiguous
        np.testing.assert_allclose(o[rows][ok], ref.o[ok], atol=2e-4, rtol=2e-4)
    # The statistics count each sequence's own causal window.
    assert 0.0 <= routing.stats()["sparsity"] < 1.0


def test_varlen_max_seqlen_inferred_or_given(rng):
    seqs = _sequences(rng, [20, 50], [20, 50])
    q, k, v = (np.concatenate([s[j] for s in seqs]) for j in range(3))
    cu = np.array([0, 20, 70], np.int32)
    a = dashattn.forward(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, **METHOD)
    b = dashattn.forward(q, k, v, cu_seqlens_q=[0, 20, 70], cu_seqlens_k=cu, max_seqlen_q=50, max_seqlen_k=50,
                         **METHOD)
    np.testing.assert_array_equal(a, b)


def test_padded_batch_with_lengths(rng):
    """Right-padded [b, n, h, d] with seqlens: real rows equal the unpadded sequence, padding gives 0 / -inf."""
    n = 90
    lengths = [90, 41, 17]
    q, k, v = R.structured_problem(rng, 3, n, n, 4, 2, 64, 16)
    seqlens = np.array(lengths, np.int32)
    o, lse = dashattn.forward(q, k, v, seqlens_q=seqlens, seqlens_k=seqlens, return_lse=True, **METHOD)
    for s, length in enumerate(lengths):
        alone, alone_lse = dashattn.forward(q[s:s + 1, :length], k[s:s + 1, :length], v[s:s + 1, :length],
                                            return_lse=True, **METHOD)
        np.testing.assert_allclose(o[s, :length], alone[0], atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(lse[s, :, :length], alone_lse[0], atol=1e-6, rtol=1e-6)
        assert (o[s, length:] == 0).all()
        assert np.isneginf(lse[s, :, length:]).all()
    assert not np.isnan(o).any()
