"""Decoder.reset and Decoder.fork (continuous batching): a reset slot takes a new prompt and a fork continues its
source, each step bit for bit what a twin decoder gives that reached the same state without them; a paged decoder
shares a fork's full pages and reuses freed ones. The GPU variant runs where a CUDA device is present."""

import numpy as np
import pytest

import dashattn
from conftest import raw_bits, requires_cuda

import reference as R

METHOD = dict(chunk_size=16, gamma=4.0, sigma=5.0)


class _Twins:
    """Decoders a and b of three sequences; sources[s] are rows of token source s (q, k, v of one problem)."""

    def __init__(self, rng, page_size, convert=lambda x: x, **kw):
        q, k, v = R.structured_problem(rng, 4, 200, 200, 4, 2, 64, 16)
        self.src = [convert(x) for x in (q, k, v)]
        self.zeros = lambda shape: convert(np.full(shape, np.nan, np.float32))
        opts = dict(initial_capacity=16, page_size=page_size, **METHOD, **kw)
        self.a = dashattn.Decoder(3, 4, 2, 64, **opts)
        self.b = dashattn.Decoder(3, 4, 2, 64, **opts)

    def step(self, dec, feeds):
        """feeds[i] = (source, from, count) for sequence i (None: no token)."""
        feeds = [f or (0, 0, 0) for f in feeds]
        t = max(1, max(c for _, _, c in feeds))
        inputs = []
        for x in self.src:
            rows = self.zeros((3, t) + tuple(x.shape[2:]))
            for i, (s, start, c) in enumerate(feeds):
                rows[i, :c] = x[s, start:start + c]
            inputs.append(rows)
        o, lse, r = dec.step(*inputs, new_tokens=[c for _, _, c in feeds], return_lse=True, return_routing=True)
        return [raw_bits(x) for x in (o, lse, r.mask, r.tau, r.mu, r.active_chunks)]

    def step_both(self, feeds):
        got, want = self.step(self.a, feeds), self.step(self.b, feeds)
        for x, y in zip(got, want):
            np.testing.assert_array_equal(x, y)
        assert self.a.lengths == self.b.lengths
        return got


def _scenario(tw, page):
    a, b = tw.a, tw.b
    tw.step(a, [(0, 0, 90), (1, 0, 60), (2, 0, 20)])
    tw.step(b, [(0, 0, 90), None, (2, 0, 20)])
    free = a.free_pages
    a.reset(1)
    assert a.lengths == [90, 0, 20]
    if page:
        assert a.free_pages == free + -(-60 // page)
    tw.step_both([(0, 90, 1), (3, 0, 40), (2, 20, 1)])  # a new prompt in the reset slot

    free = a.free_pages
    a.fork(0, 2)
    b.reset(2)
    tw.step(b, [None, None, (0, 0, 91)])
    assert a.lengths == b.lengths == [91, 40, 91]
    if page:
        assert a.free_pages == free + -(-21 // page) - (1 if 91 % page else 0)
        table = np.asarray(raw_bits(a.block_table()))
        full = 91 // page
        np.testing.assert_array_equal(table[2, :full], table[0, :full])
    same = tw.step_both([(0, 91, 2), (3, 40, 1), (0, 91, 2)])  # the same tokens into source and fork
    for x in same:
        np.testing.assert_array_equal(x[0], x[2])
    tw.step_both([(0, 93, 3), (3, 41, 1), (1, 100, 3)])  # then each its own

    a.reset(0)
    b.reset(0)
    tw.step_both([(1, 0, 150), None, (1, 103, 1)])  # reuses the source's freed pages; the fork keeps its shared ones
    tw.step_both([(1, 150, 1), (3, 42, 1), (1, 104, 1)])


@pytest.mark.parametrize("page_size", [0, 64])
def test_reset_and_fork_equal_a_twin_decoder(rng, page_size):
    _scenario(_Twins(rng, page_size, dtype="f32"), page_size)


def test_reset_and_fork_errors(rng):
    dec = dashattn.Decoder(2, 4, 2, 64, dtype="f32", **METHOD)
    for call, name in ((lambda: dec.reset(2), "seq"), (lambda: dec.reset(-1), "seq"),
                       (lambda: dec.fork(2, 0), "src"), (lambda: dec.fork(0, 5), "dst")):
        with pytest.raises(dashattn.InvalidArgumentError, match=rf"'{name}'.*\[0, 2\)"):
            call()
    assert dec.free_pages == 0  # contiguous caches


@pytest.mark.gpu
@requires_cuda
def test_cuda_reset_and_fork_equal_a_twin_decoder(rng):
    import torch

    _scenario(_Twins(rng, 128, lambda x: torch.from_numpy(x).to("cuda", torch.bfloat16), dtype=torch.bfloat16,
                     device="cuda"), 128)
