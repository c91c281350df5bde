#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention (causal, GQA) on the shapes dashattn_bench_cpu uses.

Prints one JSON line: {"torch": version, "threads": n, "dtype": ..., "sdpa_ms": median wall time,
"sdpa_cpu_ms": median process CPU time (all threads)}. Exits with status 3
when torch cannot be imported, so the C++ benchmark can say "torch not available" instead of failing.
"""
import argparse
import json
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--hq", type=int, default=16)
    ap.add_argument("--hkv", type=int, default=2)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="bf16")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0 keeps torch's default")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # torch missing or broken: not an error of the benchmark
        print(json.dumps({"error": f"torch not importable: {exc}"}))
        return 3
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    gen = torch.Generator().manual_seed(0)
    # [b, h, n, d], the layout SDPA expects; random normal inputs (never time on zeros).
    q = torch.randn(1, args.hq, args.n, args.d, generator=gen).to(dtype)
    k = torch.randn(1, args.hkv, args.n, args.d, generator=gen).to(dtype)
    v = torch.randn(1, args.hkv, args.n, args.d, generator=gen).to(dtype)
    times, cpu_times = [], []
    with torch.inference_mode():
        for it in range(args.warmup + args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            elapsed = (time.perf_counter() - start) * 1e3
            cpu_elapsed = (time.process_time() - cpu_start) * 1e3
            if it >= args.warmup:
                times.append(elapsed)
                cpu_times.append(cpu_elapsed)
    assert torch.isfinite(out.float()).all()
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": args.dtype,
                      "sdpa_ms": statistics.median(times), "sdpa_cpu_ms": statistics.median(cpu_times)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
