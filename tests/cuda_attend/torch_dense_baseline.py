"""Dense baselines at the Stage-2 benchmark shapes: PyTorch SDPA with the cuDNN and the flash backends.

Prefill at batch 1 and decoding (one query, bottom-right causal = full attention over the cache) at batch 24;
h_q = 32, h_kv = 2, d = 128, bf16. Prints medians in ms (CUDA events, warm-up first, random inputs).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main(max_k, min_k=16, prefill_only=False):
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'case':<22} {'cudnn ms':>10} {'flash ms':>10}")
    n = min_k * 1024
    while n <= max_k * 1024:
        cases = (("prefill", 1, n),) if prefill_only else (("prefill", 1, n), ("decode b24", 24, 1))
        for name, b, nq in cases:
            q = torch.randn(b, 32, nq, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, 2, n, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, 2, n, 128, device="cuda", dtype=torch.bfloat16)
            causal = nq > 1
            row = [f"{name} N={n // 1024}K"]
            for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
                try:
                    with sdpa_kernel(backend):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                        row.append(f"{median_ms(fn, 7 if nq > 1 else 30):10.3f}")
                except Exception as e:  # a backend may refuse a shape
                    row.append(f"{'n/a':>10}")
                    print(f"  {backend}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
            print(f"{row[0]:<22} {row[1]} {row[2]}")
            del q, k, v
        n *= 2


if __name__ == "__main__":
    # Usage: torch_dense_baseline.py [max K] [min K] [--prefill]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 64, int(args[1]) if len(args) > 1 else 16, "--prefill" in sys.argv)
