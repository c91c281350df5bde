"""forward() takes its workspace from the arrays' framework (NumPy here, torch's caching allocator on a GPU): the
outputs are bit for bit those of a call whose workspace the library allocates, and the allocator is asked once per
call for the bytes the call needs (none when the caller owns every routing output)."""

import numpy as np
import pytest

import dashattn
import dashattn._api as api
from conftest import requires_cuda

import reference as R


def _calls_and_outputs(monkeypatch, run, own):
    asked = []
    original = api._workspace_allocator

    def allocator(frame):
        alloc = original(frame)
        return None if own or alloc is None else (lambda n: (asked.append(n), alloc(n))[1])

    monkeypatch.setattr(api, "_workspace_allocator", allocator)
    return asked, run()


@pytest.mark.parametrize("shape", [(2, 300, 300), (3, 1, 700)])  # prefill; decode rows (n_q = 1 < n_k)
def test_framework_workspace_gives_the_library_workspace_bits(rng, monkeypatch, shape):
    b, n_q, n_k = shape
    q, k, v = R.structured_problem(rng, b, n_q, n_k, 8, 2, 64, 16)
    run = lambda: dashattn.forward(q, k, v, chunk_size=16, return_lse=True)  # noqa: E731
    asked, (o, lse) = _calls_and_outputs(monkeypatch, run, own=False)
    _, (o_own, lse_own) = _calls_and_outputs(monkeypatch, run, own=True)
    assert len(asked) == 1 and asked[0] > 255  # the plan's bytes, plus room to align the base to 256 bytes
    np.testing.assert_array_equal(o, o_own)
    np.testing.assert_array_equal(lse, lse_own)
    # With every routing output caller-owned the mask lives there: no workspace is asked for.
    asked, _ = _calls_and_outputs(monkeypatch, lambda: dashattn.forward(q, k, v, chunk_size=16,
                                                                        return_routing=True), own=False)
    assert asked == []


@pytest.mark.gpu
@requires_cuda
def test_cuda_framework_workspace_gives_the_library_workspace_bits(rng, monkeypatch):
    import torch

    q, k, v = (torch.from_numpy(a).to("cuda", torch.bfloat16)
               for a in R.structured_problem(rng, 24, 1, 4096, 32, 2, 128, 64))
    run = lambda: dashattn.forward(q, k, v, return_lse=True)  # noqa: E731
    asked, (o, lse) = _calls_and_outputs(monkeypatch, run, own=False)
    _, (o_own, lse_own) = _calls_and_outputs(monkeypatch, run, own=True)
    assert len(asked) == 1
    assert torch.equal(o, o_own) and torch.equal(lse, lse_own)
