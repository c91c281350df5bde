"""Runs the CUDA benchmark and the PyTorch baselines in one command and merges them into the table of
benchmark-protocol.md (our columns added). Usage:
    python3 bench/gpu/run_gpu_bench.py --bench build/bench/gpu/dashattn_gpu_bench [--sizes ...] [--out DIR]
Writes bench.jsonl (every measurement), sm_clock.csv (the SM clock every 100 ms, where nvidia-smi is available)
and table.md to --out, and prints the table last.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys


def run_jsonl(cmd, log, timeout):
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        sys.stderr.write(f"{' '.join(cmd)} timed out after {timeout} s\n")
        proc = subprocess.CompletedProcess(cmd, 124, out)
    log.write(proc.stdout)
    log.flush()
    rows = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if proc.returncode != 0:
        sys.stderr.write(f"{' '.join(cmd)} exited with {proc.returncode}\n{proc.stdout[-3000:]}\n")
    return rows


def start_clock_log(path):
    """The SM clock every 100 ms, logged by nvidia-smi beside the runs (None where it is not available)."""
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm", "--format=csv,noheader", "-lms",
                                 "100"], stdout=open(path, "w"), stderr=subprocess.DEVNULL)
    except OSError:
        return None


def read_clock_log(path):
    """(seconds since the epoch, SM MHz) samples of start_clock_log's file (nvidia-smi writes local time)."""
    samples = []
    try:
        with open(path) as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                try:
                    t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                    samples.append((t, float(parts[1].split()[0])))
                except (ValueError, IndexError):
                    continue
    except OSError:
        pass
    return samples


def clock_lines(samples, m, sizes, sp):
    """The median SM clock over each timed row's window (rows carry t0 / t1), for the rows the tables' ratios use
    (m: the timed rows by (mode, n, what, s), as main builds it): a row timed while the clock dipped, or at the power
    limit, reads slower than the kernel's own level."""
    if not samples:
        return []
    peak = max(c for _, c in samples)

    def clock(r):
        if r is None or "t0" not in r:
            return None
        inside = sorted(c for t, c in samples if r["t0"] - 0.1 <= t <= r["t1"] + 0.1)
        return inside[len(inside) // 2] if inside else None

    out = ["", f"SM clock over each timing (median of 100 ms samples, MHz; the run's highest {peak:.0f}):", ""]
    low = []
    for mode in ("prefill", "decode"):
        s2 = "stage2_chunk" if mode == "prefill" else "stage2_token"
        first = "stage0" if mode == "prefill" else "stage01_fused"
        for n in sizes:
            named = [("cuDNN", m.get((mode, n, "sdpa_cudnn", None))), ("FA2", m.get((mode, n, "sdpa_flash", None))),
                     ("Stage 0" if mode == "prefill" else "Stage 0+1", m.get((mode, n, first, None)))]
            named += [(f"S2 {s * 100:g}%", m.get((mode, n, s2, s))) for s in sp]
            cells = []
            for name, r in named:
                c = clock(r)
                cells.append(f"{name} {c:.0f}" if c is not None else f"{name} n/a")
                if c is not None and c < 0.95 * peak:
                    low.append(f"{mode} {n // 1024}K {name}")
            out.append(f"- {mode} {n // 1024}K: " + ", ".join(cells))
    if low:
        out.append("")
        out.append("Timed below 95 % of the highest clock: " + "; ".join(low) + ".")
    return out


def error_lines(rows):
    """The timings that returned an error instead of a time (the baselines' exception, cut to 200 characters), and
    run-wide errors without a row (FlexAttention unavailable), so that an n/a in the tables has its reason in the
    same report."""
    out = []
    for r in rows:
        if "error" not in r:
            continue
        if "mode" in r:
            what = r.get("what", "?") + (f" {r['s'] * 100:g}%" if r.get("s") is not None else "")
            out.append(f"- {r['mode']} {r['n'] // 1024}K {what}: {r['error']}")
        else:
            out.append(f"- {r['error']}")
    return ["", "Not timed (the error each returned):", ""] + out if out else []


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def achieved_rates(m, sizes, sp):
    """Lines of achieved rates against this run's measured ceilings: prefill TFLOP/s of the dense kernels (causal
    work, 2 n^2 d h_q FLOP) and of Stage 2 at the chunk draws (the work of the keys it attends), decode Stage 2 in
    TB/s of the K/V it reads (the random mask's kept chunks plus each token's own chunk). m: the run's measurements by
    (mode, n, what, s); a Stage-2 row carries the kept fraction of its mask."""
    copy, mm = m.get(("ceiling", 0, "copy_tbps", None)), m.get(("ceiling", 0, "matmul_tflops", None))
    if copy is None or mm is None:
        return []
    hq, hkv, d, C, b = 32, 2, 128, 64, 24
    per_s = lambda flop_or_bytes, r: flop_or_bytes / (r["ms"] * 1e-3) / 1e12  # TFLOP/s or TB/s
    lines = ["", f"Ceilings in this run: device copy {copy['tbps']:.2f} TB/s (read + write), bf16 8192^3 matmul "
             f"{mm['tflops']:.0f} TFLOP/s. Achieved:", ""]
    for n in sizes:
        dense_flop = 2.0 * n * n * d * hq  # causal: half of 4 n^2 d h_q
        cells = [f"{label} {per_s(dense_flop, r):.0f}"
                 for what, label in (("sdpa_cudnn", "cuDNN"), ("dense_ours", "ours dense"))
                 if (r := m.get(("prefill", n, what, None)))]
        dec = []
        for s in sp:
            r = m.get(("prefill", n, "stage2_chunk", s))
            if r and r.get("kept") is not None:
                # Per query: kept routable chunks (before its own) plus the causal part of its own chunk.
                keys = r["kept"] * (n / 2 - C / 2) + C / 2
                cells.append(f"S2 {s * 100:g}% {per_s(4.0 * n * keys * d * hq, r):.0f}")
            r = m.get(("decode", n, "stage2_token", s))
            if r and r.get("kept") is not None:
                diag = (n - 1) // C
                tokens = r["kept"] * diag * C + (n - diag * C)
                dec.append(f"S2 {s * 100:g}% {per_s(b * hkv * tokens * d * 2 * 2, r):.2f}")
        dense = [r for what in ("sdpa_cudnn", "sdpa_flash", "dense_ours") if (r := m.get(("decode", n, what, None)))]
        if dense:
            dec.insert(0, f"best dense {per_s(b * hkv * n * d * 2 * 2, min(dense, key=lambda r: r['ms'])):.2f}")
        lines.append(f"- {n // 1024}K: prefill TFLOP/s " + ", ".join(cells) + "; decode TB/s of K/V read " +
                     ", ".join(dec) + ".")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--sizes", default="16384,32768,65536")
    ap.add_argument("--reps", default="30")
    ap.add_argument("--out", default=".")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per program")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    clock_log = os.path.join(args.out, "sm_clock.csv")
    sampler = start_clock_log(clock_log)
    try:
        with open(os.path.join(args.out, "bench.jsonl"), "w") as log:
            ours = run_jsonl([args.bench, "--sizes", args.sizes, "--reps", args.reps], log, args.timeout)
            torch_rows = run_jsonl([sys.executable, os.path.join(here, "torch_baselines.py"), "--sizes", args.sizes],
                                   log, args.timeout)
    finally:
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
    info = {}
    for r in ours + torch_rows:
        if "device" in r:
            info.update({k: v for k, v in r.items()})
    m = {}
    for r in ours + torch_rows:
        if "mode" in r and "ms" in r:
            m[(r["mode"], r["n"], r["what"], r.get("s"))] = r
    sp = [0.75, 0.875, 0.9375]
    out = []
    out.append(f"GPU: {info.get('device', '?')}; torch {info.get('torch', '?')}, CUDA {info.get('cuda', '?')}, "
               f"cuDNN {info.get('cudnn', '?')}. Medians in ms of GPU time (each timing started behind a spin "
               "kernel, so no host launch latency is counted on either side).")
    out.append("")
    out.append("Prefill, b = 1 (S2 = Stage 2 with the random mask drawn per query chunk / per token; total = Stage 0+1 "
               "+ S2(chunk draw); speedup = best dense / total):")
    out.append("")
    out.append("| N | cuDNN | FA2 | ours dense | Stage 0+1 | real sparsity | " +
               " | ".join(f"S2 {s*100:g}%" for s in sp) + " | " +
               " | ".join(f"speedup {s*100:g}%" for s in sp) + " | " +
               " | ".join(f"flex {s*100:g}%" for s in sp) + " | extra GB |")
    out.append("|" + "---|" * (6 + 3 * len(sp) + 1))
    sizes = [int(s) for s in args.sizes.split(",")]

    def get(mode, n, what, s=None):
        r = m.get((mode, n, what, s))
        return r["ms"] if r else None

    for mode in ("prefill", "decode"):
        if mode == "decode":
            out.append("")
            out.append("Decode, b = 24, one new token (S2 with split-KV; total = Stage 0+1 + S2, timed as two graphs: "
                       "Stage 0+1 is summarize_and_route, which runs Stage 0 (the chunk the token completes) beside "
                       "Stage 1; step = the three stages captured as one graph, as an engine replays a "
                       "step, with Stage 0 beside Stage 2 as forward() runs it; "
                       "speedup = best dense / total and / step):")
            out.append("")
            out.append("| N | cuDNN | FA2 | ours dense | Stage 0+1 | real sparsity | " +
                       " | ".join(f"S2 {s*100:g}%" for s in sp) + " | " +
                       " | ".join(f"step {s*100:g}%" for s in sp) + " | " +
                       " | ".join(f"speedup {s*100:g}% total / step" for s in sp) + " | extra GB |")
            out.append("|" + "---|" * (6 + 3 * len(sp) + 1))
        for n in sizes:
            cud, fa = get(mode, n, "sdpa_cudnn"), get(mode, n, "sdpa_flash")
            best = min([x for x in (cud, fa) if x is not None], default=None)
            s0, s1 = get(mode, n, "stage0"), get(mode, n, "stage1")
            s01 = (s0 or 0) + (s1 or 0) if s0 is not None and s1 is not None else None
            fused = get(mode, n, "stage01_fused")  # decode: Stages 0 and 1 in one call
            if fused is not None:
                s01 = fused
            real = next((r.get("real_sparsity") for r in ours if r.get("mode") == mode and r.get("n") == n
                         and r.get("what") == "stage1"), None)
            extra = next((r.get("gb") for r in ours if r.get("mode") == mode and r.get("n") == n
                          and r.get("what") == "extra_memory"), None)
            cells = [f"{n // 1024}K", fmt(cud), fmt(fa), fmt(get(mode, n, "dense_ours")), fmt(s01, 4), fmt(real)]
            s2s, spd, flx, steps = [], [], [], []
            for s in sp:
                c = get(mode, n, "stage2_chunk", s) if mode == "prefill" else get(mode, n, "stage2_token", s)
                t = get(mode, n, "stage2_token", s)
                s2s.append(f"{fmt(c)} / {fmt(t)}" if mode == "prefill" else fmt(t))
                tot = (s01 + c) if (s01 is not None and c is not None) else None
                if mode == "decode":
                    st = get(mode, n, "step", s)
                    steps.append(fmt(st))
                    spd.append((f"{best / tot:.2f}x" if (best and tot) else "n/a") + " / " +
                               (f"{best / st:.2f}x" if (best and st) else "n/a"))
                else:
                    spd.append(f"{best / tot:.2f}x" if (best and tot) else "n/a")
                f = get(mode, n, "flex_block_sparse", s)
                flx.append(f"{fmt(f)} ({best / f:.2f}x)" if (f and best) else "n/a")
            row = cells + s2s + steps + spd + (flx if mode == "prefill" else []) + [fmt(extra)]
            out.append("| " + " | ".join(row) + " |")
        if mode == "decode":
            # The dense decode calls timed ten back to back, a cross-check of the one-call GPU time above, and the
            # captured step's speedups against that.
            notes = []
            for n in sizes:
                b2b = [x for x in (get(mode, n, "sdpa_cudnn_back_to_back"), get(mode, n, "sdpa_flash_back_to_back"))
                       if x is not None]
                if not b2b:
                    continue
                steps = [get(mode, n, "step", s) for s in sp]
                notes.append(f"{n // 1024}K {fmt(min(b2b))} ms (step " +
                             " / ".join(f"{min(b2b) / st:.2f}x" if st else "n/a" for st in steps) + ")")
            if notes:
                out.append("")
                out.append("Best dense decode timed ten calls back to back, and the step against it: " +
                           "; ".join(notes) + ".")
    out.extend(achieved_rates(m, sizes, sp))
    out.extend(clock_lines(read_clock_log(clock_log), m, sizes, sp))
    out.extend(error_lines(ours + torch_rows))
    text = "\n".join(out)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
