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

// Times prefill and decode at the paper's shapes and prints a table (ms, TFLOP/s, TB/s).
void run_benchmark(int max_n_k_thousands);
// The two default-tiling cases (without / with the prior bias) a kernel profiler captures: 6 launches.
void run_profile_cases();

}  // namespace attend_check
