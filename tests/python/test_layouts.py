"""Layouts and strides: [b, h, n, d] and strided views give the same result as contiguous [b, n, h, d]."""

import numpy as np
import pytest

import dashattn
import reference as R

METHOD = dict(chunk_size=16, gamma=2.0, sigma=5.0)


@pytest.fixture
def problem(rng):
    return R.structured_problem(rng, 2, 100, 100, 4, 2, 64, 16)


def test_bhnd_layout(problem):
    q, k, v = problem
    o = dashattn.forward(q, k, v, **METHOD)
    qt, kt, vt = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in problem)
    ot, lse = dashattn.forward(qt, kt, vt, layout="bhnd", return_lse=True, **METHOD)
    assert ot.shape == qt.shape  # output in the layout of the inputs
    np.testing.assert_allclose(ot.transpose(0, 2, 1, 3), o, atol=1e-6, rtol=1e-6)
    assert lse.shape == (2, 4, 100)


def test_transposed_views_without_copies(problem):
    """A [b, n, h, d] buffer viewed as [b, h, n, d] (and the reverse) is read in place."""
    q, k, v = problem
    o = dashattn.forward(q, k, v, **METHOD)
    views = [a.transpose(0, 2, 1, 3) for a in problem]  # non-contiguous [b, h, n, d] views
    assert not views[0].flags.c_contiguous
    ov = dashattn.forward(*views, layout="bhnd", **METHOD)
    np.testing.assert_allclose(ov.transpose(0, 2, 1, 3), o, atol=1e-6, rtol=1e-6)


def test_strided_slices(rng, problem):
    q, k, v = problem
    o = dashattn.forward(q, k, v, **METHOD)
    # Embed the tensors in larger buffers: padded head dim, interleaved batch, extra heads.
    big_q = np.zeros((4, 100, 6, 96), np.float32)
    big_q[::2, :, 1:5, :64] = q
    big_k = np.zeros((2, 100, 3, 80), np.float32)
    big_k[:, :, 1:, :64] = k
    big_v = np.zeros((2, 100, 2, 128), np.float32)
    big_v[:, :, :, 32:96] = v
    out = np.full((2, 100, 4, 128), 7.0, np.float32)
    res = dashattn.forward(big_q[::2, :, 1:5, :64], big_k[:, :, 1:, :64], big_v[:, :, :, 32:96],
                           out=out[:, :, :, 10:74], **METHOD)
    assert res.base is out or res is not None
    np.testing.assert_allclose(out[:, :, :, 10:74], o, atol=1e-6, rtol=1e-6)
    assert (out[:, :, :, :10] == 7.0).all() and (out[:, :, :, 74:] == 7.0).all()  # nothing outside o written


def test_read_only_inputs(problem):
    q, k, v = (a.copy() for a in problem)
    for a in (q, k, v):
        a.setflags(write=False)
    o = dashattn.forward(q, k, v, **METHOD)
    assert o.flags.writeable


def test_dlpack_fallback_allocation(problem):
    """Arrays of a framework the package does not know get outputs from the library's allocator via DLPack."""

    class Foreign:
        def __init__(self, a):
            self.a = a
            self.shape, self.dtype = a.shape, a.dtype

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    import sys
    import types

    # array_namespace() resolves from_dlpack through the object's module: give the test class a module with one.
    mod = types.ModuleType("foreign_arrays")
    mod.from_dlpack = np.from_dlpack
    sys.modules["foreign_arrays"] = mod
    Foreign.__module__ = "foreign_arrays"
    try:
        q, k, v = problem
        o = dashattn.forward(Foreign(q), Foreign(k), Foreign(v), **METHOD)
        assert isinstance(o, np.ndarray)
        np.testing.assert_allclose(o, dashattn.forward(q, k, v, **METHOD), atol=0, rtol=0)
    finally:
        del sys.modules["foreign_arrays"]
