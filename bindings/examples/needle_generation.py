"""Needle-in-a-haystack generation with DashAttention inside a Hugging Face Llama model.

A small randomly initialized Llama (no download needed) reads a long haystack of filler tokens with a planted
"needle" sequence, then generates greedily with attn_implementation="dash" (prefill + cached decoding). The
script prints the measured attention sparsity of every layer -- the fraction of causally visible keys that
DashAttention skipped, the paper's per-layer sparsity figure as text -- separately for the prefill and the
decoding steps, and saves the figure as a PNG when matplotlib is installed.

Random weights do not retrieve anything; the point is the mechanics and the measurement. Load real weights
with from_pretrained(..., attn_implementation="dash") and dashattn.hf.attach_summary_queries() to see a trained
router.

    python bindings/examples/needle_generation.py --context 4096 --layers 8 --device cuda --png sparsity.png
"""

import argparse
import time
from collections import defaultdict

import torch

import dashattn
import dashattn.hf
from transformers import AutoModelForCausalLM, LlamaConfig


def build_model(args):
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.heads * args.head_dim, intermediate_size=4 * args.heads *
                      args.head_dim, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, max_position_embeddings=args.context + args.new_tokens + 64,
                      initializer_range=0.05, pad_token_id=0, bos_token_id=1, eos_token_id=None)
    dashattn.hf.configure(cfg, chunk_size=args.chunk, alpha=args.alpha, gamma=args.gamma, sigma=args.sigma,
                          prior=args.prior)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="dash", dtype=dtype)
    dashattn.hf.attach_summary_queries(model)
    if args.summary_query_std > 0:
        # A trained router has non-zero summary queries; random ones make Stage 0 more than mean pooling.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("indexer_q"):
                    p.normal_(0.0, args.summary_query_std)
    return model.to(args.device).eval()


def haystack_with_needle(args):
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(10, args.vocab, (1, args.context), generator=g)
    needle = torch.tensor([2, 3, 4, 5, 6, 7, 8, 9])  # a token pattern that appears nowhere else
    at = int(args.depth * (args.context - 2 * len(needle)))
    ids[0, at:at + len(needle)] = needle
    ids[0, -len(needle) // 2:] = needle[: len(needle) // 2]  # the question: the needle's first half
    ids[0, 0] = 1
    return ids.to(args.device), at


def per_layer(records):
    """Sparsity per layer, weighting each call by its queries (attended / visible keys are what it measures)."""
    attended, visible = defaultdict(int), defaultdict(int)
    for r in records:
        for head in r["per_kv_head"]:
            attended[r["layer"]] += head["attended_keys"]
            visible[r["layer"]] += head["visible_keys"]
    return {layer: 1.0 - attended[layer] / visible[layer] for layer in sorted(visible) if visible[layer]}


def print_bars(title, sparsity):
    print(f"\n{title}")
    for layer, s in sparsity.items():
        print(f"  layer {layer:2d} | {'#' * round(s * 50):<50s} | {100 * s:5.1f}%")
    if sparsity:
        print(f"  mean     {100 * sum(sparsity.values()) / len(sparsity):5.1f}%")


def save_png(path, prefill, decode):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\nmatplotlib is not installed: no PNG written")
        return
    layers = list(prefill)
    fig, ax = plt.subplots(figsize=(max(4, 0.35 * len(layers) + 2), 3))
    width = 0.4
    ax.bar([l - width / 2 for l in layers], [prefill[l] for l in layers], width, label="prefill")
    ax.bar([l + width / 2 for l in layers], [decode.get(l, 0.0) for l in layers], width, label="decoding")
    ax.set_xticks(layers)
    ax.set_xlabel("layer")
    ax.set_ylabel("attention sparsity")
    ax.set_ylim(0, 1)
    ax.set_title("DashAttention per-layer sparsity")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    print(f"\nwrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=2048, help="prompt length in tokens")
    ap.add_argument("--depth", type=float, default=0.3, help="needle position as a fraction of the prompt")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=1.5)
    ap.add_argument("--gamma", type=float, default=8.0, help="routing temperature (larger: sparser)")
    ap.add_argument("--sigma", type=float, default=1e8)
    ap.add_argument("--prior", default="estimate_diagonal", choices=["estimate_diagonal", "raw", "none"])
    ap.add_argument("--summary-query-std", type=float, default=0.5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=["bf16", "f16", "f32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png", default="needle_sparsity.png", help="PNG path ('' to skip)")
    args = ap.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "f32")

    print(f"dashattn {dashattn.__version__}, backends: "
          f"{', '.join(b['name'] for b in dashattn.backends() if b['available'])}; device {args.device}, "
          f"{args.dtype}; context {args.context}, chunk {args.chunk}, alpha {args.alpha}, gamma {args.gamma}, "
          f"prior {args.prior}")
    model = build_model(args)
    ids, needle_at = haystack_with_needle(args)
    print(f"needle planted at token {needle_at} (chunk {needle_at // args.chunk} of {args.context // args.chunk})")

    with torch.no_grad(), dashattn.hf.record_routing() as records:
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
    generated = out[0, ids.shape[1]:].tolist()
    print(f"generated {len(generated)} tokens in {elapsed:.2f} s (statistics collection included): {generated}")

    prefill = per_layer([r for r in records if r["n_q"] > 1])
    decode = per_layer([r for r in records if r["n_q"] == 1])
    print_bars(f"prefill sparsity per layer ({args.context} queries)", prefill)
    print_bars(f"decoding sparsity per layer ({args.new_tokens} steps)", decode)
    if args.png:
        save_png(args.png, prefill, decode)


if __name__ == "__main__":
    main()
