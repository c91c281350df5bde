"""Dense and block-sparse baselines of the GPU benchmark, timed in the same command as our kernels.

PyTorch SDPA with the cuDNN and the FlashAttention backends (prefill b=1 causal, decode b=24 one query), and
FlexAttention with a random block-sparse BlockMask of 128 x 128 tiles shared by all heads at each sparsity
(prefill). Medians of CUDA-event timings after warm-up, on random (never zero) bf16 inputs. One JSON object per
line on stdout.

--layout says how q, k and v lie in memory: bhnd ([b, h, n, d], SDPA's own order, the default) or bnhd ([b, n, h, d],
FlashAttention's and the library's logical order, passed to SDPA as a transposed view). dashattn_gpu_bench's option
of the same name times our kernels on either, so that both sides can run on the same memory layout.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


# GPU cycles of the spin that precedes each timed call (~150 us at H100 / H200 clocks): it holds the GPU while the
# host records the start event and launches the call, so that the timing counts the call's GPU time only, as
# triton.testing.do_bench does behind its cache flush and as dashattn_gpu_bench times our kernels.
SPIN_CYCLES = 300_000


# Wall-clock window (seconds since the epoch) of the last median_ms's timings, which emit() reports with the next
# timed row and then forgets: run_gpu_bench.py reads the GPU's clock log over it.
_window = {}


def median_ms(fn, reps=20, warmup=3, calls=1):
    """Median per-call time over `reps` timings of `calls` launches between two events, each timing started behind
    a GPU spin (GPU time only). With several calls back to back, each also overlaps the previous call's host cost."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    _window["t0"] = time.time()
    times = []
    spin = getattr(torch.cuda, "_sleep", None)  # a private helper of long standing; without it, host time counts
    for _ in range(reps):
        if spin is not None:
            spin(SPIN_CYCLES)
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    _window["t1"] = time.time()
    times.sort()
    return times[len(times) // 2]


def emit(**kw):
    if "ms" in kw and "t1" in _window:
        kw.update(t0=round(_window["t0"], 3), t1=round(_window["t1"], 3))
        _window.clear()
    print(json.dumps(kw), flush=True)


def block_mask_from_table(keep):
    """FlexAttention's BlockMask for causal attention over the kept 128 x 128 blocks of `keep` ([blocks, blocks]
    bool, its diagonal kept), built from the table itself. create_block_mask would evaluate a mask function on every
    (query, key) pair, an [n, n] index grid: 72 GiB at 96K, more than an 80 GB GPU holds. The blocks are those it
    derives: the kept blocks below the diagonal are full (no mask inside), the diagonal ones partial (causal inside)."""
    from torch.nn.attention.flex_attention import BlockMask
    blocks = keep.shape[0]
    idx = torch.arange(blocks, device=keep.device)
    full = keep & (idx[None, :] < idx[:, None])
    partial = idx[None, :] == idx[:, None]

    def ordered(m):
        # Each row's block count and its block indices, the kept ones first in ascending order ([1, 1, ...]).
        order = torch.argsort((~m).to(torch.int8), dim=-1, stable=True)
        return m.sum(-1).to(torch.int32)[None, None], order.to(torch.int32)[None, None].contiguous()

    def causal(b, h, qi, ki):
        return ki <= qi
    kv_num, kv_idx = ordered(partial)
    full_num, full_idx = ordered(full)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=128, mask_mod=causal)


def sdpa(backend, q, k, v, causal):
    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16384,32768,65536")
    ap.add_argument("--sparsities", default="0.75,0.875,0.9375")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--decode-batch", type=int, default=24)
    ap.add_argument("--layout", choices=("bhnd", "bnhd"), default="bhnd")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compilation takes minutes)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    sparsities = [float(s) for s in args.sparsities.split(",")]
    dev = "cuda"
    emit(device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
         cudnn=torch.backends.cudnn.version(), layout=args.layout)

    def randn(b, h, n, gen):
        """A [b, h, n, d] tensor (SDPA's order) whose memory is in --layout's order."""
        if args.layout == "bhnd":
            return torch.randn(b, h, n, d, device=dev, dtype=torch.bfloat16, generator=gen)
        return torch.randn(b, n, h, d, device=dev, dtype=torch.bfloat16, generator=gen).transpose(1, 2)

    hq, hkv, d = 32, 2, 128
    # The measured ceilings that achieved rates are quoted against (benchmark-protocol.md: device copy, read +
    # write; a large bf16 matmul).
    src = torch.randn(1 << 29, device=dev, dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), args.reps)
    emit(mode="ceiling", n=0, what="copy_tbps", ms=ms, tbps=2 * src.numel() * 2 / (ms * 1e-3) / 1e12)
    del src, dst
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.mm(a, b), args.reps)
    emit(mode="ceiling", n=0, what="matmul_tflops", ms=ms, tflops=2 * 8192 ** 3 / (ms * 1e-3) / 1e12)
    del a, b
    torch.cuda.empty_cache()
    flex = None
    try:
        if args.no_flex:
            raise RuntimeError("skipped (--no-flex)")
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    except Exception as e:  # pragma: no cover - reported, not fatal
        emit(error=f"flex_attention unavailable: {e}")
    for n in sizes:
        g = torch.Generator(device=dev).manual_seed(n)
        q, k, v = randn(1, hq, n, g), randn(1, hkv, n, g), randn(1, hkv, n, g)
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                emit(mode="prefill", n=n, what=f"sdpa_{name}", ms=median_ms(sdpa(be, q, k, v, True), args.reps))
            except Exception as e:
                emit(mode="prefill", n=n, what=f"sdpa_{name}", error=str(e)[:200])
        if flex is not None:
            blocks = n // 128
            for s in sparsities:
                keep = torch.rand(blocks, blocks, device=dev, generator=g) >= s
                keep |= torch.eye(blocks, dtype=torch.bool, device=dev)
                try:
                    bm = block_mask_from_table(keep)
                    ms = median_ms(lambda: flex(q, k, v, block_mask=bm, enable_gqa=True), args.reps)
                    emit(mode="prefill", n=n, what="flex_block_sparse", s=s, ms=ms)
                except Exception as e:
                    emit(mode="prefill", n=n, what="flex_block_sparse", s=s, error=str(e)[:200])
        del q, k, v
        b = args.decode_batch
        q, k, v = randn(b, hq, 1, g), randn(b, hkv, n, g), randn(b, hkv, n, g)
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                call = sdpa(be, q, k, v, False)
                emit(mode="decode", n=n, what=f"sdpa_{name}", ms=median_ms(call, args.reps * 3))
                # Reported beside the protocol's figure (not used for the table's ratios): ten calls back to back,
                # a cross-check of the GPU time.
                emit(mode="decode", n=n, what=f"sdpa_{name}_back_to_back", ms=median_ms(call, args.reps, calls=10))
            except Exception as e:
                emit(mode="decode", n=n, what=f"sdpa_{name}", error=str(e)[:200])
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
