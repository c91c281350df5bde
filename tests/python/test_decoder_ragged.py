"""Decoder.step(new_tokens=...): a batch of sequences of different lengths gives each sequence the outputs it has
alone (bit for bit on the CPU backend); padded rows are zeros with lse = -inf."""

import numpy as np
import pytest

import dashattn
import reference as R

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)
# (t, counts per sequence): prompts of 20, 1 and 35 tokens at once, then steps where some sequences pause.
SCHEDULE = [(35, [20, 1, 35]), (3, [1, 0, 3]), (1, [0, 1, 1]), (2, [0, 0, 0]), (17, [0, 17, 2]), (1, [1, 1, 1])]


@pytest.mark.parametrize("page_size", [0, 64])
def test_ragged_steps_equal_each_sequence_alone(rng, page_size):
    totals = np.sum([c for _, c in SCHEDULE], axis=0)
    n = int(totals.max())
    q, k, v = R.structured_problem(rng, 3, n, n, 4, 2, 64, 16)
    sq = (rng.standard_normal((2, 64)) * 0.3).astype(np.float32)
    opts = dict(dtype="f32", summary_query=sq, initial_capacity=16, page_size=page_size, **METHOD)
    batch = dashattn.Decoder(3, 4, 2, 64, **opts)
    alone = [dashattn.Decoder(1, 4, 2, 64, **opts) for _ in range(3)]
    pos = [0, 0, 0]
    for t, counts in SCHEDULE:
        qs, ks, vs = (np.full((3, t) + x.shape[2:], np.nan, np.float32) for x in (q, k, v))
        for i, c in enumerate(counts):
            for src, dst in ((q, qs), (k, ks), (v, vs)):
                dst[i, :c] = src[i, pos[i]:pos[i] + c]
        o, lse, routing = batch.step(qs, ks, vs, new_tokens=np.array(counts), return_lse=True, return_routing=True)
        assert sum(h["queries"] for h in routing.stats()["per_kv_head"]) == 2 * sum(counts)  # padding rows left out
        for i, c in enumerate(counts):
            np.testing.assert_array_equal(o[i, c:], 0)
            assert np.all(np.isneginf(lse[i, :, c:]))
            if c == 0:
                continue
            sl = slice(pos[i], pos[i] + c)
            o1, lse1, r1 = alone[i].step(q[i:i + 1, sl], k[i:i + 1, sl], v[i:i + 1, sl], return_lse=True,
                                         return_routing=True)
            np.testing.assert_array_equal(o[i, :c], o1[0])
            np.testing.assert_array_equal(lse[i, :, :c], lse1[0])
            words = r1.mask.shape[-1]
            np.testing.assert_array_equal(routing.mask[i, :, :c, :words], r1.mask[0])
            np.testing.assert_array_equal(routing.mask[i, :, :c, words:], 0)
            np.testing.assert_array_equal(routing.tau[i, :, :c], r1.tau[0])
            np.testing.assert_array_equal(routing.active_chunks[i, :, :c], r1.active_chunks[0])
            pos[i] += c
        assert batch.lengths == pos
        assert batch.length == max(pos) and batch.summarized_chunks == min(pos) // 16
    for i in range(3):
        np.testing.assert_array_equal(batch.keys()[i, :pos[i]], alone[i].keys()[0])


def test_ragged_counts_default_and_errors(rng):
    q, k, v = R.structured_problem(rng, 2, 8, 8, 4, 2, 64, 16)
    a = dashattn.Decoder(2, 4, 2, 64, dtype="f32", **METHOD)
    b = dashattn.Decoder(2, 4, 2, 64, dtype="f32", **METHOD)
    np.testing.assert_array_equal(a.step(q[:, :4], k[:, :4], v[:, :4]),
                                  b.step(q[:, :4], k[:, :4], v[:, :4], new_tokens=[4, 4]))
    a.step(q[:, 4:6], k[:, 4:6], v[:, 4:6], new_tokens=[2, 1])
    assert a.lengths == [6, 5] and a.length == 6
    with pytest.raises(ValueError, match=r"new_tokens\[1\]"):
        a.step(q[:, 6:8], k[:, 6:8], v[:, 6:8], new_tokens=[1, 3])
    with pytest.raises(ValueError, match=r"new_tokens\[0\]"):
        a.step(q[:, 6:8], k[:, 6:8], v[:, 6:8], new_tokens=[-1, 0])
    with pytest.raises(ValueError, match="new_tokens"):
        a.step(q[:, 6:8], k[:, 6:8], v[:, 6:8], new_tokens=[1, 1, 1])
    assert a.lengths == [6, 5]  # failed steps commit nothing
