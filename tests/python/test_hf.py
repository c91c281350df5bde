"""Hugging Face transformers: attn_implementation="dash" on CPU."""

import pytest

from conftest import requires_transformers

pytestmark = [requires_transformers, pytest.mark.hf]


def test_dense_limit_matches_sdpa_prefill_and_generate():
    """gamma = 0 routes every chunk and prior none adds no bias: DashAttention is then exactly causal
    attention, so logits and greedy generation (prefill + cached decoding) equal sdpa's."""
    import torch
    from hf_models import generate, left_padded_batch, tiny_llama_pair

    dash, sdpa = tiny_llama_pair(chunk_size=16, gamma=0.0, prior="none")
    ids, mask = left_padded_batch("cpu", [70, 70], 70)
    with torch.no_grad():
        torch.testing.assert_close(dash(ids).logits, sdpa(ids).logits, atol=1e-4, rtol=1e-4)
    ids, mask = left_padded_batch("cpu", [75, 40, 17], 75)
    assert torch.equal(generate(dash, ids, mask, 16), generate(sdpa, ids, mask, 16))


def test_left_padded_row_equals_unpadded_row():
    import torch
    import dashattn.hf as dhf
    from hf_models import generate, left_padded_batch, tiny_llama_pair

    dash, _ = tiny_llama_pair(chunk_size=16, gamma=4.0, sigma=10.0)
    ids, mask = left_padded_batch("cpu", [90, 53], 90)
    with dhf.record_routing() as records:
        batch_out = generate(dash, ids, mask, 20)
    assert max(r["sparsity"] for r in records) > 0.05  # routing is really sparse here
    alone = generate(dash, ids[1:, 90 - 53:], mask[1:, 90 - 53:], 20)
    assert torch.equal(batch_out[1, 90:], alone[0, 53:])
    # Logits of the real positions agree too (position ids follow the padding mask, as generate sets them).
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = dash(input_ids=ids, attention_mask=mask, position_ids=pos).logits[1, 90 - 53:]
        single = dash(input_ids=ids[1:, 90 - 53:]).logits[0]
    torch.testing.assert_close(padded, single, atol=1e-4, rtol=1e-4)


def test_right_padded_prefill():
    import torch
    from hf_models import tiny_llama_pair

    dash, _ = tiny_llama_pair(chunk_size=16, gamma=2.0)
    ids = torch.randint(3, 256, (2, 60))
    mask = torch.ones(2, 60, dtype=torch.long)
    mask[1, 35:] = 0
    with torch.no_grad():
        padded = dash(input_ids=ids, attention_mask=mask).logits[1, :35]
        single = dash(input_ids=ids[1:, :35]).logits[0]
    torch.testing.assert_close(padded, single, atol=1e-4, rtol=1e-4)


def test_config_fields_and_summary_queries():
    import torch
    import dashattn.hf as dhf
    from hf_models import tiny_llama_pair

    dash, _ = tiny_llama_pair(chunk_size=16, gamma=4.0)
    ids = torch.randint(3, 256, (1, 96))
    with torch.no_grad():
        base = dash(ids).logits
    assert dhf.attach_summary_queries(dash) == 2
    names = [n for n, _ in dash.named_parameters() if n.endswith("indexer_q")]
    assert len(names) == 2 and dash.get_parameter(names[0]).shape == (1 * 64,)
    with torch.no_grad():
        torch.testing.assert_close(dash(ids).logits, base, atol=0, rtol=0)  # zeros = mean pooling = no parameter
        dash.get_parameter(names[0]).normal_(0, 2.0)
        assert not torch.allclose(dash(ids).logits, base)
    with torch.no_grad(), dhf.record_routing() as rec_a:
        dash(ids)
    dhf.configure(dash.config, gamma=0.0)
    with torch.no_grad(), dhf.record_routing() as rec_b:
        dash(ids)
    assert [r["layer"] for r in rec_a] == [0, 1]
    assert all(r["sparsity"] == 0.0 for r in rec_b) and any(r["sparsity"] > 0 for r in rec_a)
    with pytest.raises(ValueError, match="alpha"):
        dhf.configure(dash.config, alpha=1.0)
    with pytest.raises(ValueError):
        dhf.configure(dash.config, chunksize=3)


def test_attention_function_with_unfilled_cache_slots():
    """A preallocated cache (unfilled slots at the end, masked out) gives what the filled part alone gives."""
    import types

    import torch
    import dashattn
    from dashattn.hf import dash_attention_forward

    torch.manual_seed(0)
    module = types.SimpleNamespace(config=types.SimpleNamespace(dash_chunk_size=16, dash_gamma=3.0), is_causal=True)
    q = torch.randn(2, 4, 1, 64)
    k = torch.randn(2, 2, 80, 64)
    v = torch.randn(2, 2, 80, 64)
    lengths = [50, 77]
    mask = torch.zeros(2, 80, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    out, _ = dash_attention_forward(module, q, k, v, mask, scaling=None)
    assert out.shape == (2, 1, 4, 64)
    for i, n in enumerate(lengths):
        alone = dashattn.forward(q[i:i + 1], k[i:i + 1, :, :n], v[i:i + 1, :, :n], layout="bhnd", chunk_size=16,
                                 gamma=3.0)
        torch.testing.assert_close(out[i], alone[0].transpose(0, 1), atol=1e-6, rtol=1e-6)
    holes = mask.clone()
    holes[0, 10] = False
    with pytest.raises(ValueError, match="holes"):
        dash_attention_forward(module, q, k, v, holes)
