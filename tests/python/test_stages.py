"""summarize -> route -> attend composes to forward; each stage against the reference."""

import numpy as np
import pytest

import dashattn
import reference as R

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)


@pytest.mark.parametrize("prior", ["estimate_diagonal", "raw", "none"])
def test_stages_compose_to_forward(rng, prior):
    q, k, v = R.structured_problem(rng, 2, 110, 110, 4, 2, 64, 16)
    sq = (rng.standard_normal((2, 64)) * 0.3).astype(np.float32)
    o, lse = dashattn.forward(q, k, v, sq, prior=prior, return_lse=True, **METHOD)
    routing = dashattn.route(q, k, sq, prior=prior, **METHOD)
    o2, lse2 = dashattn.attend(q, k, v, routing, prior=prior, return_lse=True, gamma=2.0, sigma=5.0)
    np.testing.assert_allclose(o2, o, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(lse2, lse, atol=1e-6, rtol=1e-6)


def test_summarize_matches_reference(rng):
    _, k, _ = R.structured_problem(rng, 2, 100, 100, 2, 2, 64, 16)
    sq = (rng.standard_normal((2, 64)) * 0.5).astype(np.float32)
    s = dashattn.summarize(k, sq, chunk_size=16)
    assert s.shape == (2, 100 // 16, 2, 64) and s.dtype == k.dtype
    for b in range(2):
        np.testing.assert_allclose(s[b], R.summaries_of(k[b], sq, 16, "f32"), atol=1e-5, rtol=1e-5)


def test_route_from_precomputed_summaries(rng):
    q, k, _ = R.structured_problem(rng, 1, 100, 100, 4, 2, 64, 16)
    s = dashattn.summarize(k, chunk_size=16)
    a = dashattn.route(q, k, **METHOD)
    b = dashattn.route(q, summaries=s, n_k=100, **METHOD)
    np.testing.assert_array_equal(a.mask, b.mask)
    np.testing.assert_array_equal(a.active_chunks, b.active_chunks)
    ref = R.forward_sequence(q[0], k[0], k[0], chunk=16, gamma=2.0, sigma=5.0)
    ok = ~ref.ambiguous
    np.testing.assert_array_equal(R.unpack_mask(a.mask[0], 7)[:, ok], ref.mask[:, ok])


def test_no_complete_chunk(rng):
    """Fewer keys than one chunk: nothing is routable, the diagonal chunk is dense causal attention."""
    q, k, v = R.structured_problem(rng, 1, 10, 10, 2, 1, 64, 16)
    o, routing = dashattn.forward(q, k, v, return_routing=True, **METHOD)
    np.testing.assert_allclose(o[0], R.dense_sequence(q[0], k[0], v[0])[0], atol=1e-5, rtol=1e-5)
    assert (routing.active_chunks == 1).all()
    r = dashattn.route(q, k, **METHOD)
    assert (r.active_chunks == 1).all()
