"""The GPU benchmark's report (bench/gpu/run_gpu_bench.py): the achieved rates it prints against the run's measured
ceilings, checked on hand-computed inputs. Needs no GPU: the report is plain arithmetic over the measurements."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def load_report():
    spec = importlib.util.spec_from_file_location("run_gpu_bench", ROOT / "bench" / "gpu" / "run_gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_ceilings_no_rates():
    assert load_report().achieved_rates({}, [32768], [0.75]) == []


def test_rates_follow_the_work_and_the_bytes():
    n, s = 32768, 0.75
    m = {
        ("ceiling", 0, "copy_tbps", None): {"ms": 0.7, "tbps": 3.0},
        ("ceiling", 0, "matmul_tflops", None): {"ms": 1.4, "tflops": 800.0},
        # causal dense work 2 n^2 d h_q = 8.796e12 FLOP: 8.796 ms is 1000 TFLOP/s
        ("prefill", n, "sdpa_cudnn", None): {"ms": 2 * n * n * 128 * 32 / 1e12},
        # Stage 2 attending kept * (n/2 - 32) + 32 keys per query: 4 n keys d h_q FLOP
        ("prefill", n, "stage2_chunk", s): {"ms": 4.0 * n * (0.25 * (n / 2 - 32) + 32) * 128 * 32 / 1e12, "kept": 0.25},
        # decode: 24 x 2 heads x (0.25 * 511 * 64 + 64) keys x 128 x 2 bytes x (K and V) = 202.5 MB in 0.0675 ms
        ("decode", n, "stage2_token", s): {"ms": 24 * 2 * 8240 * 128 * 4 / 3e12 * 1e3, "kept": 0.25},
        ("decode", n, "dense_ours", None): {"ms": 24 * 2 * n * 128 * 4 / 2.5e12 * 1e3},
    }
    lines = load_report().achieved_rates(m, [n], [s])
    text = "\n".join(lines)
    assert "device copy 3.00 TB/s" in text and "matmul 800 TFLOP/s" in text
    row = next(line for line in lines if line.startswith("- 32K"))
    assert "cuDNN 1000" in row
    assert "S2 75% 1000" in row
    assert "best dense 2.50" in row
    assert "S2 75% 3.00" in row


def test_clock_log_is_read_in_local_time(tmp_path):
    log = tmp_path / "sm_clock.csv"
    log.write_text("2026/11/27 10:35:14.198, 1980 MHz\nnot a sample\n2026/11/27 10:35:14.298, 1650 MHz\n")
    samples = load_report().read_clock_log(str(log))
    assert [c for _, c in samples] == [1980.0, 1650.0]
    assert abs((samples[1][0] - samples[0][0]) - 0.1) < 1e-6
    assert load_report().read_clock_log(str(tmp_path / "missing.csv")) == []


def test_clock_over_each_timing_flags_the_dips():
    report = load_report()
    samples = [(100.0 + 0.1 * i, 1980.0) for i in range(40)] + [(104.0 + 0.1 * i, 1650.0) for i in range(20)]
    rows = {
        ("prefill", 32768, "sdpa_cudnn", None): {"ms": 14.0, "t0": 100.5, "t1": 101.0},
        ("prefill", 32768, "stage2_chunk", 0.875): {"ms": 2.3, "t0": 104.5, "t1": 105.0},
        # a row without a window (its timing's window went to another row) reads n/a, and is never flagged
        ("prefill", 32768, "stage0", None): {"ms": 0.02},
    }
    lines = report.clock_lines(samples, rows, [32768], [0.875])
    text = "\n".join(lines)
    assert "highest 1980" in text
    row = next(line for line in lines if line.startswith("- prefill 32K"))
    assert "cuDNN 1980" in row and "S2 87.5% 1650" in row and "Stage 0 n/a" in row
    assert "Timed below 95 % of the highest clock: prefill 32K S2 87.5%." in text
    assert report.clock_lines([], rows, [32768], [0.875]) == []


def test_failed_timings_are_reported_with_their_error():
    report = load_report()
    rows = [
        {"mode": "prefill", "n": 98304, "what": "flex_block_sparse", "s": 0.9375, "error": "CUDA out of memory"},
        {"mode": "decode", "n": 32768, "what": "sdpa_flash", "error": "no kernel"},
        {"mode": "prefill", "n": 98304, "what": "sdpa_cudnn", "ms": 134.1},
        {"error": "flex_attention unavailable: no module"},
    ]
    lines = report.error_lines(rows)
    assert "- prefill 96K flex_block_sparse 93.75%: CUDA out of memory" in lines
    assert "- decode 32K sdpa_flash: no kernel" in lines
    assert "- flex_attention unavailable: no module" in lines
    assert not any("sdpa_cudnn" in line for line in lines)
    assert report.error_lines([rows[2]]) == []
