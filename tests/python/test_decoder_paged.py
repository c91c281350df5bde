"""Decoder(page_size=P): a paged decoder's steps equal a contiguous decoder's bit for bit on the CPU backend; its
pools, block table and gathered keys; the page-size rule. GPU variants run where a CUDA device is present."""

import numpy as np
import pytest

import dashattn
from conftest import raw_bits, requires_cuda, requires_torch

import reference as R

METHOD = dict(gamma=4.0, sigma=5.0)


def _steps(total):
    """A short prefill, then single tokens, three-token steps and longer ones that straddle pages."""
    pattern = [1, 3, 1, 1, 3, 17, 1, 3, 40, 3, 1, 64]
    steps, pos, i = [5], 5, 0
    while pos < total:
        steps.append(min(pattern[i % len(pattern)], total - pos))
        pos += steps[-1]
        i += 1
    return steps


def _pair(b, h_q, h_kv, d, page, chunk, **kw):
    common = dict(chunk_size=chunk, initial_capacity=16, **METHOD, **kw)
    return (dashattn.Decoder(b, h_q, h_kv, d, page_size=page, **common),
            dashattn.Decoder(b, h_q, h_kv, d, **common))


def _run(paged, contiguous, q, k, v, steps):
    """Steps both decoders through q, k, v (the rows after what they hold): the same bits in every output."""
    start, pos = paged.length, 0
    for t in steps:
        sl = slice(pos, pos + t)
        got = paged.step(q[:, sl], k[:, sl], v[:, sl], return_lse=True, return_routing=True)
        want = contiguous.step(q[:, sl], k[:, sl], v[:, sl], return_lse=True, return_routing=True)
        for a, b in zip(got[:2], want[:2]):
            np.testing.assert_array_equal(raw_bits(a), raw_bits(b))
        for name in ("mask", "tau", "mu", "active_chunks"):
            np.testing.assert_array_equal(raw_bits(getattr(got[2], name)), raw_bits(getattr(want[2], name)))
        pos += t
    assert paged.length == contiguous.length == start + pos


@pytest.mark.parametrize("page,chunk", [(64, 16), (128, 32), (128, 128), (256, 64)])
@pytest.mark.parametrize("h_q", [2, 8])
def test_paged_decoder_equals_contiguous(rng, page, chunk, h_q):
    steps = _steps(4 * page + page // 2 + 13)  # five pages per sequence: a page taken without widening the table
    total = sum(steps)
    q, k, v = R.structured_problem(rng, 3, total, total, h_q, 2, 64, chunk)
    sq = (rng.standard_normal((2, 64)) * 0.3).astype(np.float32)
    paged, contiguous = _pair(3, h_q, 2, 64, page, chunk, dtype="f32", summary_query=sq)
    first_pages = paged.num_pages
    _run(paged, contiguous, q, k, v, steps)

    np.testing.assert_array_equal(raw_bits(paged.keys()), k)
    np.testing.assert_array_equal(raw_bits(paged.values()), v)
    np.testing.assert_array_equal(raw_bits(paged.summaries()), raw_bits(contiguous.summaries()))
    assert paged.num_pages >= 4 * first_pages  # grew at least twice from one page per sequence

    # Key j of sequence i is row j % P of page table[i, j // P]; no page is owned twice, and the pages of a
    # sequence are not neighbours in the pool.
    table, pool = raw_bits(paged.block_table()), raw_bits(paged.key_pages())
    used = -(-total // page)
    assert table.dtype == np.int32 and table.shape[0] == 3 and table.shape[1] >= used
    assert pool.shape == (paged.num_pages, page, 2, 64)
    owned = table[:, :used]
    assert len(np.unique(owned)) == owned.size and owned.min() >= 0 and owned.max() < paged.num_pages
    assert (np.diff(owned, axis=1) != 1).any()
    j = np.arange(total)
    np.testing.assert_array_equal(pool[owned[2][j // page], j % page], k[2])


def test_failed_step_commits_nothing_and_a_retry_gives_the_same_result(rng):
    q, k, v = R.structured_problem(rng, 2, 70, 70, 4, 2, 64, 16)
    paged, contiguous = _pair(2, 4, 2, 64, 64, 16, dtype="f32")
    _run(paged, contiguous, q, k, v, [63])
    nan = np.full_like(k[:, 63:66], np.nan)
    with pytest.raises(ValueError, match="o.shape"):  # forward refuses o: the three rows were written, not committed
        paged.step(q[:, 63:66], nan, nan, out=np.empty((2, 2, 4, 64), np.float32))
    assert paged.length == 63
    _run(paged, contiguous, q[:, 63:], k[:, 63:], v[:, 63:], [3, 4])
    np.testing.assert_array_equal(raw_bits(paged.keys()), k)


def test_page_accessors_and_errors(rng):
    with pytest.raises(dashattn.InvalidArgumentError, match="page_size.*multiple of 64.*got 32"):
        dashattn.Decoder(1, 2, 1, 64, dtype="f32", page_size=32, chunk_size=16)
    with pytest.raises(dashattn.InvalidArgumentError, match="page_size.*chunk_size = 128.*got 64"):
        dashattn.Decoder(1, 2, 1, 64, dtype="f32", page_size=64, chunk_size=128)

    dec = dashattn.Decoder(2, 2, 1, 64, dtype="f32", page_size=128, chunk_size=32, initial_capacity=256)
    assert dec.page_size == 128 and dec.num_pages == 4  # two pages per sequence for 256 tokens
    q, k, v = R.structured_problem(rng, 2, 130, 130, 2, 1, 64, 32)
    dec.step(q, k, v)
    assert np.asarray(dec.keys()).shape == (2, 130, 1, 64)
    with pytest.raises(dashattn.InvalidArgumentError, match="copy.*key_pages"):
        dec.keys(copy=False)
    with pytest.raises(dashattn.InvalidArgumentError, match="copy.*value_pages"):
        dec.values(copy=False)
    view, copy = dec.key_pages(copy=False), dec.key_pages()
    np.testing.assert_array_equal(raw_bits(view), raw_bits(copy))
    assert np.asarray(dec.block_table(copy=False)).shape == np.asarray(dec.block_table()).shape

    contiguous = dashattn.Decoder(1, 2, 1, 64, dtype="f32", chunk_size=32)
    assert contiguous.page_size == 0 and contiguous.num_pages == 0
    for accessor in ("block_table", "key_pages", "value_pages"):
        with pytest.raises(dashattn.InvalidArgumentError, match=accessor):
            getattr(contiguous, accessor)()


@requires_torch
def test_paged_decoder_bf16_with_torch(rng):
    import torch

    q, k, v = (torch.from_numpy(a).to(torch.bfloat16)
               for a in R.structured_problem(rng, 2, 300, 300, 8, 2, 64, 64))
    paged, contiguous = _pair(2, 8, 2, 64, 128, 64, dtype=torch.bfloat16)
    _run(paged, contiguous, q, k, v, _steps(300))
    assert torch.equal(paged.keys(), k) and torch.equal(paged.values(), v)
    assert torch.equal(paged.summaries(), contiguous.summaries())


@pytest.mark.gpu
@requires_cuda
def test_cuda_paged_decoder_equals_contiguous(rng):
    import torch

    q, k, v = (torch.from_numpy(a).to("cuda", torch.bfloat16)
               for a in R.structured_problem(rng, 2, 600, 600, 8, 2, 128, 64))
    paged, contiguous = _pair(2, 8, 2, 128, 256, 64, dtype=torch.bfloat16, device="cuda")
    _run(paged, contiguous, q, k, v, _steps(600))
    assert torch.equal(paged.keys(), k) and torch.equal(paged.values(), v)
    assert paged.block_table().is_cuda and paged.key_pages().shape[1] == 256
