"""Decoder: decode steps equal the corresponding rows of a prefill."""

import numpy as np
import pytest

import dashattn
import reference as R

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)


@pytest.mark.parametrize("steps", [[1] * 40, [23, 1, 1, 9, 16, 1, 30]])
def test_decode_equals_prefill_rows(rng, steps):
    total = sum(steps)
    q, k, v = R.structured_problem(rng, 2, total, total, 4, 2, 64, 16)
    sq = (rng.standard_normal((2, 64)) * 0.3).astype(np.float32)
    full, full_lse = dashattn.forward(q, k, v, sq, return_lse=True, **METHOD)
    dec = dashattn.Decoder(2, 4, 2, 64, dtype="f32", summary_query=sq, initial_capacity=16, **METHOD)
    pos = 0
    for t in steps:
        sl = slice(pos, pos + t)
        o, lse = dec.step(q[:, sl], k[:, sl], v[:, sl], return_lse=True)
        np.testing.assert_allclose(o, full[:, sl], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(lse, full_lse[:, :, sl], atol=1e-5, rtol=1e-5)
        pos += t
    assert dec.length == total and dec.summarized_chunks == total // 16
    assert dec.capacity >= total  # grew from 16 tokens
    np.testing.assert_array_equal(dec.keys(), k)
    # Cached summaries are bitwise those of a prefill (a summary depends only on its own chunk's keys).
    np.testing.assert_array_equal(dec.summaries(), dashattn.summarize(k, sq, chunk_size=16))


def test_decoder_routing_and_errors(rng):
    q, k, v = R.structured_problem(rng, 1, 70, 70, 2, 1, 64, 16)
    dec = dashattn.Decoder(1, 2, 1, 64, dtype=np.float32, **METHOD)
    dec.step(q[:, :69], k[:, :69], v[:, :69])
    o, routing = dec.step(q[:, 69:], k[:, 69:], v[:, 69:], return_routing=True)
    _, full_routing = dashattn.forward(q, k, v, return_routing=True, **METHOD)
    np.testing.assert_array_equal(routing.mask[0, :, 0], full_routing.mask[0, :, 69])
    assert routing.stats()["per_kv_head"][0]["queries"] == 1
    with pytest.raises(TypeError):
        dec.step(q[:, :1].astype(np.float16), k[:, :1].astype(np.float16), v[:, :1].astype(np.float16))
    with pytest.raises(ValueError, match="k.shape"):
        dec.step(q[:, :1], k[:, :2], v[:, :2])
    assert dec.length == 70  # failed steps commit nothing
