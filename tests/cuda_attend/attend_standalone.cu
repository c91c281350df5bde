// Standalone driver of the Stage-2 checks and timings, built with nvcc alone (run_device.sh) where the full
// project cannot be configured. Exit codes: 0 pass, 1 failures, 77 no CUDA device.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attend_check.h"

int main(int argc, char** argv) {
  bool verbose = false, bench = false, check = true, profile = false;
  int max_k = 64;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-v")) verbose = true;
    if (!std::strcmp(argv[i], "--bench")) bench = true;
    if (!std::strcmp(argv[i], "--no-check")) check = false;
    if (!std::strcmp(argv[i], "--profile")) profile = true;
    if (!std::strcmp(argv[i], "--max-k") && i + 1 < argc) max_k = std::atoi(argv[++i]);
  }
  if (!attend_check::have_device()) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  const int failures = check ? attend_check::run_conformance(verbose) : 0;
  if (bench) attend_check::run_benchmark(max_k);
  if (profile) attend_check::run_profile_cases(max_k);
  return failures ? 1 : 0;
}
