// Checks and timings of the CUDA Stage-2 kernels (sparse prefill, split-KV decode, dense baseline), driven
// directly through the backend's internal launch interface against a float64 host reference.
#pragma once

#include <cstdint>
#include <string>

namespace attend_check {

// True when a CUDA device is present (tests exit with 77 otherwise).
bool have_device();

// Runs the conformance grid; prints one line per failing case (and a summary); returns the number of failures.
int run_conformance(bool verbose);

// Stage 1's bias lists for Stage 2 against Stage 1's own mask and μ (route_lists_check.cu); returns the failures.
int run_route_lists_check(bool verbose);

// Times prefill and decode at the paper's shapes and prints a table (ms, TFLOP/s, TB/s).
void run_benchmark(int max_n_k_thousands);
// The cases a kernel profiler captures, at n_k_thousands·1024 keys: the persistent and the default d = 128 tiling,
// each without and with the prior bias (2 warm-up + 1 timed launch each: 12 launches).
void run_profile_cases(int n_k_thousands);

}  // namespace attend_check
