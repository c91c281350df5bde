"""torch integration on CPU (the same tests run on CUDA in test_gpu.py): torch in, torch out; custom op;
torch.compile; the DashAttention module; the autograd error."""

import numpy as np
import pytest

from conftest import requires_torch

pytestmark = requires_torch

import dashattn  # noqa: E402
import reference as R  # noqa: E402

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)


@pytest.fixture
def tensors(rng):
    import torch

    return tuple(torch.from_numpy(a) for a in R.structured_problem(rng, 2, 100, 100, 4, 2, 64, 16))


def test_torch_in_torch_out(tensors):
    import torch

    q, k, v = tensors
    o, lse, routing = dashattn.forward(q, k, v, return_lse=True, return_routing=True, **METHOD)
    assert isinstance(o, torch.Tensor) and o.dtype == q.dtype and o.device == q.device
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32
    assert isinstance(routing.mask, torch.Tensor) and routing.mask.dtype == torch.uint32
    expected = dashattn.forward(q.numpy(), k.numpy(), v.numpy(), **METHOD)
    np.testing.assert_array_equal(o.numpy(), expected)


def test_bf16_torch_against_reference(tensors):
    import torch

    q, k, v = (t.to(torch.bfloat16) for t in tensors)
    o = dashattn.forward(q, k, v, **METHOD)
    assert o.dtype == torch.bfloat16
    for s in range(2):
        ref = R.forward_sequence(q[s].double().numpy(), k[s].double().numpy(), v[s].double().numpy(), chunk=16,
                                 gamma=2.0, sigma=5.0, key_dtype="bf16")
        ok = torch.from_numpy(~ref.ambiguous)
        torch.testing.assert_close(o[s][ok].double(), torch.from_numpy(ref.o)[ok], atol=3e-2, rtol=3e-2)


def test_custom_op_layouts_and_varlen(tensors):
    import torch
    from dashattn.torch import dash_attention

    q, k, v = tensors
    o = dash_attention(q, k, v, **METHOD)
    qt, kt, vt = (t.transpose(1, 2) for t in tensors)  # [b, h, n, d] views
    o_bnhd = dash_attention(qt, kt, vt, layout="bhnd", out_layout="bnhd", **METHOD)
    assert o_bnhd.shape == q.shape and o_bnhd.is_contiguous()
    torch.testing.assert_close(o_bnhd, o, atol=0, rtol=0)
    o_bhnd = dash_attention(qt, kt, vt, layout="bhnd", **METHOD)
    torch.testing.assert_close(o_bhnd.transpose(1, 2), o, atol=0, rtol=0)
    cu = torch.tensor([0, 100, 200], dtype=torch.int32)
    o_var, lse = dash_attention(q.reshape(200, 4, 64), k.reshape(200, 2, 64), v.reshape(200, 2, 64),
                                cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=100, max_seqlen_k=100,
                                return_lse=True, **METHOD)
    torch.testing.assert_close(o_var.reshape(2, 100, 4, 64), o, atol=1e-6, rtol=1e-6)
    assert lse.shape == (4, 200)


def test_opcheck(tensors):
    """torch.library.opcheck: schema, fake tensor and dispatch consistency of the custom op."""
    import torch
    import dashattn.torch  # noqa: F401  registers the op

    q, k, v = (t[:, :40] for t in tensors)
    args = (q, k, v, None, None, None, 0, 0, None, None, "bnhd", "bnhd", 16, 1.5, 2.0, 5.0, "estimate_diagonal",
            0.0, "exact", "auto")
    torch.library.opcheck(torch.ops.dashattn.forward.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_torch_compile_fullgraph(tensors):
    import torch
    from dashattn.torch import dash_attention

    q, k, v = tensors

    def layer(q, k, v):
        return dash_attention(q * 1.0, k, v, **METHOD).sum(dim=-1)

    eager = layer(q, k, v)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), eager, atol=0, rtol=0)


def test_module_and_backward_error(tensors):
    import torch
    from dashattn.torch import DashAttention

    q, k, v = tensors
    attn = DashAttention(num_kv_heads=2, head_dim=64, **METHOD)
    assert torch.count_nonzero(attn.summary_query) == 0  # zero init: mean pooling, as in the paper
    assert attn.summary_query.requires_grad
    with torch.no_grad():
        o = attn(q, k, v)
    torch.testing.assert_close(o, dashattn.forward(q, k, v, **METHOD), atol=0, rtol=0)
    out = attn(q.clone().requires_grad_(), k, v)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="backward not available yet on backend 'cpu'"):
        out.sum().backward()
    # The array API routes tensors that need grad through the op as well.
    out2 = dashattn.forward(q.clone().requires_grad_(), k, v, **METHOD)
    with pytest.raises(dashattn.BackwardNotAvailableError):
        out2.sum().backward()


def test_decoder_with_torch(tensors):
    import torch

    q, k, v = tensors
    full = dashattn.forward(q, k, v, **METHOD)
    dec = dashattn.Decoder(2, 4, 2, 64, dtype=torch.float32, **METHOD)
    outs = [dec.step(q[:, :50].contiguous(), k[:, :50].contiguous(), v[:, :50].contiguous())]
    for i in range(50, 100):
        outs.append(dec.step(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1]))
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=1e-5)
    assert isinstance(dec.keys(), torch.Tensor)
