"""Paged K/V caches (block_table, FlashAttention's kvcache convention): a batch whose keys and values live in a
shuffled page pool gives what the same batch gives with contiguous K/V, bit for bit on the CPU backend; GPU variants
run where a CUDA device is present."""

import numpy as np
import pytest

import dashattn
from conftest import requires_cuda, requires_torch
from dashattn import errors

import reference as R

LENGTHS = [300, 211, 97]  # a full sequence, one ending inside a page, one shorter than the largest page
METHOD = dict(gamma=8.0, sigma=1.0)


def _problem(rng, n, h_q, h_kv, d, chunk, page, decode, dtype=np.float32):
    """Padded q, k, v with LENGTHS keys; sequence 1 repeats sequence 0's first page so the two can share it."""
    q, k, v = R.structured_problem(rng, 3, n, n, h_q, h_kv, d, chunk)
    for x in (k, v):
        x[1, :page] = x[0, :page]
    seqlens_q = np.array([1, 3, 2] if decode else LENGTHS, np.int32)
    if decode:
        q = np.ascontiguousarray(q[:, :3])
    return q.astype(dtype), k.astype(dtype), v.astype(dtype), seqlens_q, np.array(LENGTHS, np.int32)


def _pool(rng, k, v, lengths, page, extra=2):
    """k, v [b, n, h, d] as page pools [pages, page, h, d] and an int32 block table [b, ceil(n / page)].

    Pages are handed out in a shuffled order, sequence 1's first page is sequence 0's, and every row no sequence
    owns (spare pages, the tail of a last page) is NaN, so a read through a wrong translation shows.
    Table entries past a sequence's length point at a spare page.
    """
    b, n = k.shape[:2]
    used = [-(-int(n_k) // page) for n_k in lengths]
    shared = used[0] > 0 and used[1] > 0
    owned = sum(used) - int(shared)
    order = rng.permutation(owned + extra).astype(np.int32)
    table = np.full((b, -(-n // page)), order[-1], np.int32)
    fresh = iter(order[:owned])
    for s in range(b):
        for j in range(used[s]):
            table[s, j] = table[0, 0] if (s == 1 and j == 0 and shared) else next(fresh)
    pools = []
    for x in (k, v):
        pool = np.full((owned + extra, page) + x.shape[2:], np.nan, x.dtype)
        for s in range(b):
            rows = np.arange(lengths[s])
            pool[table[s, rows // page], rows % page] = x[s, :lengths[s]]
        pools.append(pool)
    return pools[0], pools[1], table


def _valid_summaries(summaries, lengths, chunk):
    """The summary rows each sequence owns (the rest of the buffer is left as allocated)."""
    return [np.asarray(summaries)[s, :n // chunk] for s, n in enumerate(lengths)]


CASES = [  # (chunk, page, h_q, h_kv, d)
    (16, 64, 4, 4, 64),
    (64, 128, 8, 2, 128),
    (128, 256, 8, 2, 64),
    (16, 256, 4, 1, 128),
]


@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("chunk,page,h_q,h_kv,d", CASES)
def test_paged_forward_equals_contiguous(rng, chunk, page, h_q, h_kv, d, decode):
    n = 300
    q, k, v, seqlens_q, seqlens_k = _problem(rng, n, h_q, h_kv, d, chunk, page, decode)
    kp, vp, table = _pool(rng, k, v, seqlens_k, page)
    sq = rng.standard_normal((h_kv, d)).astype(np.float32)
    common = dict(seqlens_q=seqlens_q, seqlens_k=seqlens_k, chunk_size=chunk, return_lse=True, return_routing=True,
                  backend="cpu", **METHOD)
    o, lse, routing = dashattn.forward(q, k, v, sq, **common)
    po, plse, prouting = dashattn.forward(q, kp, vp, sq, block_table=table, max_seqlen_k=n, **common)
    assert not np.isnan(po).any()
    np.testing.assert_array_equal(po, o)
    np.testing.assert_array_equal(plse, lse)
    for name in ("mask", "tau", "mu", "active_chunks"):
        np.testing.assert_array_equal(getattr(prouting, name), getattr(routing, name), err_msg=name)
    for got, want in zip(_valid_summaries(prouting.summaries, seqlens_k, chunk),
                         _valid_summaries(routing.summaries, seqlens_k, chunk)):
        np.testing.assert_array_equal(got, want)
    assert prouting.n_k == n and prouting.sparsity == routing.sparsity

    # max_seqlen_k defaults to the whole table (max_pages * page_size): only the padded length changes, and with
    # it the mask's width, not what any sequence computes.
    wo, wlse = dashattn.forward(q, kp, vp, sq, block_table=table, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                                chunk_size=chunk, return_lse=True, backend="cpu", **METHOD)
    np.testing.assert_array_equal(wo, o)
    np.testing.assert_array_equal(wlse, lse)


def test_paged_bhnd_layout(rng):
    """layout="bhnd" describes the pools as [pages, h_kv, page_size, d], like the other tensors."""
    q, k, v, seqlens_q, seqlens_k = _problem(rng, 300, 8, 2, 64, 64, 128, False)
    kp, vp, table = _pool(rng, k, v, seqlens_k, 128)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    common = dict(seqlens_q=seqlens_q, seqlens_k=seqlens_k, chunk_size=64, return_lse=True, backend="cpu", **METHOD)
    o, lse = dashattn.forward(q, k, v, **common)
    po, plse = dashattn.forward(t(q), t(kp), t(vp), block_table=table, max_seqlen_k=300, layout="bhnd", **common)
    np.testing.assert_array_equal(po, t(o))
    np.testing.assert_array_equal(plse, lse)


def test_paged_bf16_equals_contiguous(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v, seqlens_q, seqlens_k = _problem(rng, 300, 8, 2, 128, 64, 128, False)
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    kp, vp, table = _pool(rng, k, v, seqlens_k, 128)
    common = dict(seqlens_q=seqlens_q, seqlens_k=seqlens_k, chunk_size=64, return_lse=True, backend="cpu", **METHOD)
    o, lse = dashattn.forward(q, k, v, **common)
    po, plse = dashattn.forward(q, kp, vp, block_table=table, max_seqlen_k=300, **common)
    assert po.dtype == q.dtype
    np.testing.assert_array_equal(po.view(np.uint16), o.view(np.uint16))
    np.testing.assert_array_equal(plse, lse)


@pytest.mark.parametrize("decode", [False, True])
def test_paged_stages_equal_contiguous(rng, decode):
    chunk, page, n = 16, 64, 300
    q, k, v, seqlens_q, seqlens_k = _problem(rng, n, 8, 2, 64, chunk, page, decode)
    kp, vp, table = _pool(rng, k, v, seqlens_k, page)
    sq = rng.standard_normal((2, 64)).astype(np.float32)

    summaries = dashattn.summarize(k, sq, seqlens_k=seqlens_k, chunk_size=chunk, backend="cpu")
    paged = dashattn.summarize(kp, sq, block_table=table, max_seqlen_k=n, seqlens_k=seqlens_k, chunk_size=chunk,
                               backend="cpu")
    assert paged.shape == summaries.shape == (3, n // chunk, 2, 64)
    for got, want in zip(_valid_summaries(paged, seqlens_k, chunk), _valid_summaries(summaries, seqlens_k, chunk)):
        np.testing.assert_array_equal(got, want)

    batch = dict(seqlens_q=seqlens_q, seqlens_k=seqlens_k, chunk_size=chunk, backend="cpu")
    routing = dashattn.route(q, k, sq, **batch, **METHOD)
    prouting = dashattn.route(q, kp, sq, block_table=table, max_seqlen_k=n, **batch, **METHOD)
    for name in ("mask", "tau", "mu", "active_chunks"):
        np.testing.assert_array_equal(getattr(prouting, name), getattr(routing, name), err_msg=name)

    o, lse = dashattn.attend(q, k, v, routing, return_lse=True, backend="cpu", **METHOD)
    po, plse = dashattn.attend(q, kp, vp, prouting, block_table=table, return_lse=True, backend="cpu", **METHOD)
    assert not np.isnan(po).any()
    np.testing.assert_array_equal(po, o)
    np.testing.assert_array_equal(plse, lse)


def test_paged_errors_name_the_argument(rng):
    q, k, v = R.structured_problem(rng, 3, 128, 128, 4, 2, 64, 16)
    lengths = np.array([128, 70, 5], np.int32)
    kp, vp, table = _pool(rng, k, v, lengths, 64)
    batch = dict(seqlens_q=lengths, seqlens_k=lengths, chunk_size=16, backend="cpu")
    dashattn.forward(q, kp, vp, block_table=table, **batch)  # valid
    with pytest.raises(errors.InvalidArgumentError, match=r"k.shape\[1\] \(page size\)") as e:
        dashattn.forward(q, kp[:, :32], vp[:, :32], block_table=table, max_seqlen_k=64, **batch)
    assert e.value.argument == "k.shape[1] (page size)"
    with pytest.raises(errors.InvalidArgumentError, match=r"block_table.shape\[1\]"):
        dashattn.forward(q, kp, vp, block_table=table[:, :1], max_seqlen_k=128, **batch)
    bad = table.copy()
    bad[2, 0] = kp.shape[0]
    with pytest.raises(errors.InvalidArgumentError, match=r"block_table\[2, 0\]"):
        dashattn.forward(q, kp, vp, block_table=bad, **batch)


def test_packed_varlen_batch_on_pages_equals_contiguous(rng):
    """A packed batch (chunked prefill beside decode rows) with its keys in a shuffled page pool: cu_seqlens_k
    gives the lengths, the table the rows; the result is bit for bit that of the packed contiguous keys."""
    lens_q, lens_k, page, h_q, h_kv, d = [1, 100, 37], [300, 100, 250], 64, 4, 2, 64
    cq = np.cumsum([0] + lens_q).astype(np.int32)
    ck = np.cumsum([0] + lens_k).astype(np.int32)
    q = rng.standard_normal((cq[-1], h_q, d)).astype(np.float32)
    k = rng.standard_normal((ck[-1], h_kv, d)).astype(np.float32)
    v = rng.standard_normal((ck[-1], h_kv, d)).astype(np.float32)
    used = [(n + page - 1) // page for n in lens_k]
    order = rng.permutation(sum(used) + 2)  # two spare pages, NaN
    kp = np.full((len(order), page, h_kv, d), np.nan, np.float32)
    vp = kp.copy()
    table = np.full((len(lens_k), max(used) + 1), order[-1], np.int32)
    taken = 0
    for s, n in enumerate(lens_k):
        for j in range(used[s]):
            table[s, j] = order[taken]
            taken += 1
            rows = slice(ck[s] + j * page, ck[s] + min(n, (j + 1) * page))
            kp[table[s, j], :rows.stop - rows.start] = k[rows]
            vp[table[s, j], :rows.stop - rows.start] = v[rows]
    batch = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), chunk_size=16,
                 gamma=8.0, backend="cpu")
    want = dashattn.forward(q, k, v, **batch)
    got = dashattn.forward(q, kp, vp, block_table=table, **batch)
    assert np.array_equal(got, want)
    assert not np.isnan(got).any()
    # Stage 0 alone on the packed pool: each sequence's complete chunks as from the packed keys.
    keys = dict(cu_seqlens_k=ck, max_seqlen_k=max(lens_k), chunk_size=16, backend="cpu")
    s_want = dashattn.summarize(k, **keys)
    s_got = dashattn.summarize(kp, block_table=table, **keys)
    for s, n in enumerate(lens_k):
        assert np.array_equal(s_got[s, :n // 16], s_want[s, :n // 16])
    # A table with a row too few for the packed batch's sequences is named by the binding.
    with pytest.raises(errors.InvalidArgumentError, match=r"block_table.shape\[0\]"):
        dashattn.forward(q, kp, vp, block_table=table[:2], **batch)


@requires_torch
def test_torch_op_takes_a_block_table(rng):
    import torch
    from dashattn.torch import dash_attention

    q, k, v, seqlens_q, seqlens_k = _problem(rng, 300, 8, 2, 64, 64, 128, True)
    kp, vp, table = _pool(rng, k, v, seqlens_k, 128)
    t = torch.from_numpy
    batch = dict(seqlens_q=t(seqlens_q), seqlens_k=t(seqlens_k), chunk_size=64, return_lse=True, backend="cpu",
                 **METHOD)
    o, lse = dash_attention(t(q), t(k), t(v), **batch)
    po, plse = dash_attention(t(q), t(kp), t(vp), block_table=t(table), max_seqlen_k=300, **batch)
    assert torch.equal(po, o) and torch.equal(plse, lse)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("chunk,page", [(64, 64), (64, 256), (128, 128)])
def test_cuda_paged_equals_contiguous(rng, chunk, page, decode):
    """On the CUDA backend, paged and contiguous K/V run the same tiles on the same values: the same bits."""
    import torch
    from dashattn.torch import dash_attention

    q, k, v, seqlens_q, seqlens_k = _problem(rng, 300, 8, 2, 128, chunk, page, decode)
    kp, vp, table = _pool(rng, k, v, seqlens_k, page)
    cuda = lambda a, dt=torch.bfloat16: torch.from_numpy(a).to("cuda", dt)  # noqa: E731
    q, k, v, kp, vp = (cuda(x) for x in (q, k, v, kp, vp))
    sl_q, sl_k, table = (cuda(x, torch.int32) for x in (seqlens_q, seqlens_k, table))
    common = dict(seqlens_q=sl_q, seqlens_k=sl_k, chunk_size=chunk, return_lse=True, return_routing=True, **METHOD)
    o, lse, routing = dashattn.forward(q, k, v, **common)
    po, plse, prouting = dashattn.forward(q, kp, vp, block_table=table, max_seqlen_k=300, **common)
    assert po.is_cuda and not torch.isnan(po).any()
    assert torch.equal(po, o) and torch.equal(plse, lse)
    assert torch.equal(prouting.mask, routing.mask) and torch.equal(prouting.active_chunks, routing.active_chunks)
    for s, n in enumerate(LENGTHS):
        assert torch.equal(prouting.summaries[s, :n // chunk], routing.summaries[s, :n // chunk])
    # The torch op takes the same table.
    to, tlse = dash_attention(q, kp, vp, block_table=table, max_seqlen_k=300, seqlens_q=sl_q, seqlens_k=sl_k,
                              chunk_size=chunk, return_lse=True, **METHOD)
    assert torch.equal(to, o) and torch.equal(tlse, lse)
