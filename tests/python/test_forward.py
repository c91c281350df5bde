"""forward() on the CPU backend against the float64 reference (tests/python/reference.py)."""

import math

import numpy as np
import pytest

import dashattn
import reference as R


def check_against_reference(q, k, v, sq=None, *, dtype="f32", o_tol=2e-4, **method):
    o, lse, routing = dashattn.forward(q, k, v, sq, return_lse=True, return_routing=True, **method)
    assert o.shape == q.shape and o.dtype == q.dtype
    chunk = method.get("chunk_size", 64)
    n_k = k.shape[1]
    flips = 0
    for s in range(q.shape[0]):
        ref = R.forward_sequence(q[s].astype(np.float64), k[s].astype(np.float64), v[s].astype(np.float64),
                                 None if sq is None else np.asarray(sq, np.float64), chunk=chunk,
                                 key_dtype=dtype, **{kk: vv for kk, vv in method.items() if kk != "chunk_size"})
        ok = ~ref.ambiguous
        flips += int(ref.ambiguous.sum())
        np.testing.assert_allclose(o[s][ok].astype(np.float64), ref.o[ok], atol=o_tol, rtol=o_tol)
        np.testing.assert_allclose(lse[s][:, ok], ref.lse[:, ok], atol=o_tol, rtol=o_tol)
        mask = R.unpack_mask(routing.mask[s], (n_k + chunk - 1) // chunk)
        np.testing.assert_array_equal(mask[:, ok], ref.mask[:, ok])
        np.testing.assert_array_equal(routing.active_chunks[s][:, ok], ref.active[:, ok])
        np.testing.assert_allclose(routing.mu[s][:, ok], ref.mu[:, ok], atol=1e-3, rtol=1e-3)
        has_tau = ~np.isnan(ref.tau)
        tau = routing.tau[s]
        np.testing.assert_allclose(tau[has_tau & ok[None, :]], ref.tau[has_tau & ok[None, :]], atol=1e-4, rtol=1e-4)
        n_chunks = n_k // chunk
        np.testing.assert_allclose(routing.summaries[s][:n_chunks].astype(np.float64), ref.summaries,
                                   atol=2e-3 if dtype != "f32" else 1e-5, rtol=1e-2 if dtype != "f32" else 1e-5)
    assert flips <= max(2, q.shape[0] * q.shape[1] // 50), f"{flips} near-tie rows"
    return o, lse, routing


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.25])
@pytest.mark.parametrize("prior", ["estimate_diagonal", "raw", "none"])
def test_forward_matches_reference(rng, alpha, prior):
    q, k, v = R.structured_problem(rng, 2, 130, 130, 4, 2, 64, 16)
    _, _, routing = check_against_reference(q, k, v, chunk_size=16, alpha=alpha, gamma=2.0, sigma=3.0, prior=prior)
    # The problem is built so routing is genuinely sparse: the test would not notice a dense fallback otherwise.
    assert 0.05 < routing.sparsity < 0.95


@pytest.mark.parametrize("chunk", [16, 32, 64, 128])
def test_chunk_sizes(rng, chunk):
    n = 3 * chunk + 7
    q, k, v = R.structured_problem(rng, 1, n, n, 2, 1, 64, chunk)
    check_against_reference(q, k, v, chunk_size=chunk, gamma=3.0)


@pytest.mark.parametrize("h_q,h_kv", [(2, 2), (4, 2), (8, 2), (3, 1)])
def test_gqa_groups(rng, h_q, h_kv):
    q, k, v = R.structured_problem(rng, 1, 100, 100, h_q, h_kv, 64, 16)
    check_against_reference(q, k, v, chunk_size=16, gamma=2.0)


@pytest.mark.parametrize("d", [64, 128])
def test_head_dims_and_summary_query(rng, d):
    q, k, v = R.structured_problem(rng, 1, 90, 90, 2, 2, d, 16)
    sq = (rng.standard_normal((2, d)) * 0.5).astype(np.float32)
    check_against_reference(q, k, v, sq, chunk_size=16, gamma=2.0)


def test_decode_shapes_bottom_right(rng):
    """n_q < n_k: the queries are the last rows; results equal those rows of the prefill."""
    q, k, v = R.structured_problem(rng, 2, 120, 120, 4, 2, 64, 16)
    full, full_lse = dashattn.forward(q, k, v, chunk_size=16, gamma=2.0, return_lse=True)
    for t in (1, 5):
        part, part_lse = dashattn.forward(np.ascontiguousarray(q[:, -t:]), k, v, chunk_size=16, gamma=2.0,
                                          return_lse=True)
        np.testing.assert_allclose(part, full[:, -t:], atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(part_lse, full_lse[:, :, -t:], atol=1e-6, rtol=1e-6)
    check_against_reference(np.ascontiguousarray(q[:, -7:]), k, v, chunk_size=16, gamma=2.0)


def test_scale_and_f16(rng):
    q, k, v = R.structured_problem(rng, 1, 80, 80, 2, 1, 64, 16, dtype=np.float16)
    check_against_reference(q, k, v, dtype="f16", o_tol=4e-3, chunk_size=16, gamma=2.0, scale=0.2)


def test_bf16_with_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (a.astype(ml_dtypes.bfloat16) for a in R.structured_problem(rng, 1, 80, 80, 2, 1, 64, 16))
    o = dashattn.forward(q, k, v, chunk_size=16, gamma=2.0)
    assert o.dtype == q.dtype
    ref = R.forward_sequence(q[0].astype(np.float64), k[0].astype(np.float64), v[0].astype(np.float64), chunk=16,
                             gamma=2.0, key_dtype="bf16")
    ok = ~ref.ambiguous
    np.testing.assert_allclose(o[0].astype(np.float64)[ok], ref.o[ok], atol=3e-2, rtol=3e-2)


def test_gamma_zero_prior_none_is_dense(rng):
    """gamma = 0 makes every routing weight equal, so every chunk is routed: dense causal attention."""
    q, k, v = R.structured_problem(rng, 2, 150, 150, 4, 2, 64, 32)
    o, lse, routing = dashattn.forward(q, k, v, chunk_size=32, gamma=0.0, prior="none", return_lse=True,
                                       return_routing=True)
    od, lsed = dashattn.dense_attention(q, k, v, return_lse=True)
    np.testing.assert_allclose(o, od, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(lse, lsed, atol=1e-5, rtol=1e-5)
    assert routing.sparsity == 0.0
    ref_o, ref_lse = R.dense_sequence(q[1], k[1], v[1])
    np.testing.assert_allclose(od[1], ref_o, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(lsed[1], ref_lse, atol=1e-5, rtol=1e-5)


def test_routing_stats_match_reference_counts(rng):
    q, k, v = R.structured_problem(rng, 1, 160, 160, 4, 2, 64, 16)
    routing = dashattn.route(q, k, chunk_size=16, gamma=3.0)
    ref = R.forward_sequence(q[0], k[0], v[0], chunk=16, gamma=3.0)
    stats = routing.stats()
    attended = visible = 0
    for i in range(160):
        for r in range(2):
            attended += (ref.active[r, i] - 1) * 16 + (i % 16 + 1)
            visible += i + 1
    assert math.isclose(stats["sparsity"], 1 - attended / visible, rel_tol=1e-9) or ref.ambiguous.any()
    assert len(stats["per_kv_head"]) == 2
    assert math.isclose(stats["mean_active_chunks"], ref.active.mean(), rel_tol=1e-9) or ref.ambiguous.any()


def test_introspection():
    assert dashattn.__version__.count(".") == 2
    names = [b["name"] for b in dashattn.backends()]
    assert "cpu" in names
    info = dashattn.build_info()
    assert "cpu" in info["compiled_backends"] and "cpu" in info["available_backends"]
