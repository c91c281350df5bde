"""Errors from the C++ core arrive as typed Python exceptions with the core's message, before anything runs."""

import numpy as np
import pytest

import dashattn
from dashattn import errors


@pytest.fixture
def qkv(rng):
    return (rng.standard_normal((1, 40, 4, 64)).astype(np.float32),
            rng.standard_normal((1, 40, 2, 64)).astype(np.float32),
            rng.standard_normal((1, 40, 2, 64)).astype(np.float32))


def test_invalid_argument_is_value_error(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"k.shape\[2\] \(KV heads\)") as e:
        dashattn.forward(q, np.ascontiguousarray(k[:, :, :1].repeat(3, 2)), np.ascontiguousarray(v[:, :, :1].repeat(3, 2)))
    assert isinstance(e.value, errors.InvalidArgumentError) and isinstance(e.value, errors.DashattnError)
    assert e.value.code == "invalid_argument" and e.value.argument == "k.shape[2] (KV heads)"
    with pytest.raises(ValueError, match="n_q <= n_k"):
        dashattn.forward(np.concatenate([q, q], 1), k, v)
    with pytest.raises(ValueError, match="v.shape"):
        dashattn.forward(q, k, v[:, :30])


@pytest.mark.parametrize("kwargs,match", [
    (dict(alpha=1.0), "alpha"), (dict(alpha=0.5), "alpha"), (dict(sigma=0.0), "sigma"),
    (dict(chunk_size=2), "chunk_size"), (dict(prior="softmax"), "prior"), (dict(solver="halley"), "solver"),
    (dict(layout="nbhd"), "layout"), (dict(gamma=float("nan")), "gamma"), (dict(scale=-1.0), "scale")])
def test_bad_method_parameters(qkv, kwargs, match):
    with pytest.raises(ValueError, match=match):
        dashattn.forward(*qkv, **kwargs)


def test_dtype_problems_are_type_errors(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match="q.dtype") as e:
        dashattn.forward(q.astype(np.float64), k, v)
    assert isinstance(e.value, errors.DTypeError)
    with pytest.raises(TypeError, match="k.dtype"):
        dashattn.forward(q, k.astype(np.float16), v)
    with pytest.raises(TypeError):
        dashattn.forward(q.astype(np.int32), k.astype(np.int32), v.astype(np.int32))
    with pytest.raises(TypeError, match="cu_seqlens_q.dtype"):
        dashattn.forward(q[0], k[0], v[0], cu_seqlens_q=np.array([0.0, 40.0]), cu_seqlens_k=np.array([0, 40]))


def test_inner_stride_and_rank(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="stride"):
        dashattn.forward(q[..., ::2], k[..., ::2], v[..., ::2])
    with pytest.raises(ValueError, match="rank"):
        dashattn.forward(q[0], k[0], v[0])


def test_varlen_errors(qkv):
    q, k, v = (a[0] for a in qkv)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        dashattn.forward(q, k, v, cu_seqlens_q=[0, 40])
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[num_seqs\]"):
        dashattn.forward(q, k, v, cu_seqlens_q=[0, 20, 39], cu_seqlens_k=[0, 20, 40])
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        dashattn.forward(q, k, v, cu_seqlens_q=[0, 30, 40], cu_seqlens_k=[0, 20, 40])  # n_q > n_k in sequence 0
    with pytest.raises(ValueError, match=r"seqlens_k\[0\]"):
        dashattn.forward(*qkv, seqlens_q=[10], seqlens_k=[50])


def test_backend_errors(qkv):
    with pytest.raises(RuntimeError, match="backend 'nope'") as e:
        dashattn.forward(*qkv, backend="nope")
    assert isinstance(e.value, errors.BackendUnavailableError) and e.value.code == "backend_unavailable"
    if not any(b["name"] == "cuda" and b["available"] for b in dashattn.backends()):
        # CPU arrays cannot go to a GPU backend; without a GPU that backend is unavailable or not compiled.
        with pytest.raises((RuntimeError, ValueError), match="cuda"):
            dashattn.forward(*qkv, backend="cuda")


def test_outputs_untouched_on_error(qkv):
    q, k, v = qkv
    out = np.full(q.shape, 3.0, np.float32)
    with pytest.raises(ValueError):
        dashattn.forward(q, k, v, out=out, alpha=1.0)
    assert (out == 3.0).all()
    with pytest.raises(ValueError, match="o.shape"):
        dashattn.forward(q, k, v, out=out[:, :10])


def test_not_an_array():
    with pytest.raises(TypeError, match="DLPack"):
        dashattn.forward([[1.0]], [[1.0]], [[1.0]])
